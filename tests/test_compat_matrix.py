"""``tools/compat_matrix.sh``: its syntax and argument handling, without creating any venv.

The matrix itself (three torch versions x two optree versions, each a venv and a test run) takes
far too long for the suite; ``--dry-run`` lists the cells it would run.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "tools" / "compat_matrix.sh"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def test_the_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_dry_run_lists_every_torch_and_optree_pair_and_creates_nothing(
        tmp_path: pathlib.Path) -> None:
    where = tmp_path / "matrix"
    result = run("--dry-run", "--dir", str(where))
    assert result.returncode == 0, result.stderr
    cells = [line for line in result.stdout.splitlines() if line.startswith("torch ")]
    assert [cell.split(" | ")[:2] for cell in cells] == [
        [f"torch {torch}", f"optree {optree}"]
        for torch in ("2.13.0", "2.14.1", "latest") for optree in ("0.13.0", "0.20.0")]
    assert all(str(where) in cell for cell in cells)
    assert "PIP_CONFIG_FILE=/dev/null" in cells[-1] and "PIP_CONFIG_FILE" not in cells[0]
    assert "tests/torchopt_fn/test_visual_fusion.py" in result.stdout
    assert not where.exists()


def test_versions_and_directory_can_be_chosen(tmp_path: pathlib.Path) -> None:
    result = run("--dry-run", "--torch", "2.14.1", "--optree", "0.20.0",
                 env={"COMPAT_MATRIX_DIR": str(tmp_path)})
    cells = [line for line in result.stdout.splitlines() if line.startswith("torch ")]
    assert cells == [f"torch 2.14.1 | optree 0.20.0 | {tmp_path}/torch-2.14.1, "
                     "the machine's pip configuration"]


def test_the_whole_suite_can_be_chosen(tmp_path: pathlib.Path) -> None:
    result = run("--dry-run", "--whole-suite", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "tests: tests --ignore=tests/test_docs.py" in result.stdout  # no docs extra there


@pytest.mark.parametrize("args", [("--bogus",), ("--timeout", "soon"), ("--dir",),
                                  ("--torch", "")])
def test_bad_arguments_exit_2_with_a_message(args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert "compat_matrix.sh:" in result.stderr


def test_help_exits_0() -> None:
    result = run("--help")
    assert result.returncode == 0 and "--dry-run" in result.stdout
