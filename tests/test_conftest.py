"""tests/conftest.py: hypothesis profiles (deterministic in CI, exploratory on demand) and
torch's generator seeded per test, the global-state guard and the device fixture."""

import os
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


def test_the_guard_sees_and_restores_each_kind_of_global_state():
    from torch._dynamo import config as dynamo_config

    import optax_compat
    from tests import conftest

    before = conftest._global_state()
    changes = {
        "torch.get_default_dtype()": lambda: torch.set_default_dtype(torch.float64),
        "optax_compat.config.jax_enable_x64":
            lambda: optax_compat.config.update("jax_enable_x64", True),
        "os.environ": lambda: os.environ.__setitem__("OPTAX_COMPAT_GUARD_PROBE", "1"),
        "torch._dynamo.config":
            lambda: setattr(dynamo_config, "cache_size_limit", dynamo_config.cache_size_limit + 1),
    }
    for name, change in changes.items():
        change()
        changed = conftest._global_state()
        assert changed[name] != before[name], name
        conftest._restore(name, before[name])
        assert conftest._global_state() == before, name


def test_the_device_fixture_defaults_to_the_cpu(device):
    expected = os.environ.get("OPTAX_COMPAT_TEST_DEVICE", "cpu")
    assert device == torch.device(expected)
    assert torch.zeros(1).device.type == device.type
