"""tests/conftest.py's device plumbing: ``OPTAX_COMPAT_TEST_DEVICE`` sets the ``device`` fixture,
and on a device other than the CPU a test's factory calls that name no device land there.

Each case runs a tiny test file in a pytest subprocess that loads tests/conftest.py as a
plugin, with the variable set to ``meta`` (a device every machine has) or unset.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]

TINY_TEST = '''
import os

import torch

from optax_compat.testing import make_tree, strategies


def test_tensors_land_on_the_test_device(device):
    expected = torch.device(os.environ.get("OPTAX_COMPAT_TEST_DEVICE", "cpu"))
    assert device == expected
    assert torch.ones(2).device == expected and torch.tensor([1.0]).device == expected
    assert make_tree()["layer"]["w"].device == expected
    assert strategies.tensors((2,)).example().device == expected
'''


@pytest.mark.parametrize("test_device", ["meta", None], ids=["meta", "unset"])
def test_the_test_device_reaches_the_tests_factory_calls(test_device, tmp_path):
    (tmp_path / "test_tiny.py").write_text(TINY_TEST)
    environment = {key: value for key, value in os.environ.items()
                   if key != "OPTAX_COMPAT_TEST_DEVICE"}
    if test_device is not None:
        environment["OPTAX_COMPAT_TEST_DEVICE"] = test_device
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPOSITORY), *filter(None, [environment.get("PYTHONPATH")])])
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-p", "no:randomly", "--rootdir", str(tmp_path), str(tmp_path / "test_tiny.py")],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 passed" in result.stdout
