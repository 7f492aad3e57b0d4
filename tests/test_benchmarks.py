"""The benchmarks' measuring helpers: what they time and import, never how fast anything is."""

import gc
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def bench_step(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_step

    return bench_step


def test_a_script_imports_the_checkout_it_sits_in(tmp_path: pathlib.Path) -> None:
    """A copy of ``optax_compat`` earlier on the path (another clone's editable install, a
    release) is not the one a script measures."""
    decoy = tmp_path / "site" / "optax_compat"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the decoy was imported')\n")
    # As ``python benchmarks/<script>.py`` does: the scripts' folder first, then the path.
    probe = (f"import sys, runpy; sys.path[0] = {str(BENCHMARKS)!r}; "
             f"runpy.run_path({str(BENCHMARKS / '_checkout.py')!r}); "
             "import optax_compat; print(optax_compat.__file__)")
    env = {**os.environ, "PYTHONPATH": str(decoy.parent)}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=True)
    assert pathlib.Path(result.stdout.strip()) == ROOT / "optax_compat" / "__init__.py"


def test_timed_steps_run_without_the_garbage_collector(bench_step) -> None:
    seen = []

    def step() -> None:
        seen.append(gc.isenabled())

    step.prepare = lambda: seen.append(gc.isenabled())
    times = bench_step.sample_times({"step": step}, repeats=2, warmup=1)
    assert len(times["step"]) == 2
    assert seen == [True, False] * 3  # collected between steps, never during one
    assert gc.isenabled()


def test_the_streaming_yardstick_writes_in_place(bench_step) -> None:
    """An in-place add reads both operands and writes the first: 12 bytes per float32 value,
    each crossing the bus once (a ``copy_``'s destination would also be fetched)."""
    step = bench_step.streaming_step(8)
    first = step()
    before = first.clone()
    second = step()
    assert second is first  # written in place, no destination fetched for nothing
    assert not second.equal(before)
