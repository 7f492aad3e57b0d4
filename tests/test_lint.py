"""The tree passes ``ruff check`` with the project's own configuration (``pyproject.toml``)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
