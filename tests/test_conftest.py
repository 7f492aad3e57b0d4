"""The hypothesis profiles of tests/conftest.py: deterministic in CI, exploratory on demand."""

from hypothesis import settings


def test_ci_profile_is_deterministic_and_keeps_no_database():
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None


def test_long_profile_explores_fresh_examples():
    long = settings.get_profile("long")
    assert not long.derandomize and long.max_examples > settings.get_profile("ci").max_examples
