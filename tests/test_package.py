"""Package metadata: one version, read by the installer from the code."""

import importlib.metadata

import optax_compat


def test_version_is_the_installed_one():
    assert optax_compat.__version__ == importlib.metadata.version("optax-compat")
