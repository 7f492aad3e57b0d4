"""tests/conftest.py: hypothesis profiles (deterministic in CI, exploratory on demand) and
torch's generator seeded per test."""

import zlib

import torch
from hypothesis import settings


def test_ci_profile_is_deterministic_and_keeps_no_database():
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None


def test_long_profile_explores_fresh_examples():
    long = settings.get_profile("long")
    assert not long.derandomize and long.max_examples > settings.get_profile("ci").max_examples


def test_torch_is_seeded_by_the_test_id(request):
    drawn = torch.rand(3)
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    assert torch.equal(drawn, torch.rand(3))
