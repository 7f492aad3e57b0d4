"""The benchmarks' measuring helpers: what they time and import, never how fast anything is."""

import gc
import os
import pathlib
import subprocess
import sys

import pytest
import torch

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


@pytest.fixture
def bench_all(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_all

    return bench_all


def _table(path: pathlib.Path, columns: list[str], rows: list[list[str]]) -> str:
    lines = [columns, ["---"] * len(columns), *rows]
    path.write_text("Measured with `python benchmarks/bench_all.py`.\n\n"
                    + "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n")
    return str(path)


def test_saved_tables_are_read_by_their_headers(bench_all, tmp_path: pathlib.Path) -> None:
    """``--replot`` reads each table by its header: a table of some columns (``--implementations``)
    or of an older set of them gives each time to its own implementation."""
    ratios = ["ours ÷ limit", "ours ÷ optax"]
    older = _table(tmp_path / "older.md",
                   ["model", "optimizer", "limit ms", "ours pure", "ours fused", "optax jit",
                    *ratios], [["a", "adam", "5.5", "17.5", "5.27", "13.1", "0.95", "0.40"]])
    newer = _table(tmp_path / "newer.md",
                   ["model", "optimizer", "limit ms", "ours pure", "ours compiled", "optax jit",
                    *ratios],
                   [["c", "sgd", "31.7", "77.5", "43.6~", ">45s", "1.38", bench_all.NONE],
                    ["a", "adam", "5.4", "17", "9.8", "13", "1.8", "0.75"]])
    results = bench_all.read_markdown([older, newer])
    assert results.implementations == ("ours pure", "ours compiled", "optax jit")
    assert results.done == [("a", "adam"), ("c", "sgd")]
    assert results.rows["c", "sgd"]["times"] == {"ours pure": (pytest.approx(0.0775), 1),
                                                 "ours compiled": (pytest.approx(0.0436), 1)}
    # A later table's row replaces an earlier one's: the older fused time is gone.
    assert results.rows["a", "adam"]["times"] == {"ours pure": (pytest.approx(0.017), 1),
                                                  "ours compiled": (pytest.approx(0.0098), 1),
                                                  "optax jit": (pytest.approx(0.013), 1)}
    assert results.rows["a", "adam"]["limit"] == pytest.approx(0.0054)


def test_first_compile_times_each_implementations_first_call(monkeypatch) -> None:
    """Every column of ``bench_first_compile.py`` builds its step and runs it compiled (the
    ``eager`` backend: graph capture only, to stay quick)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_first_compile
    import torch

    for implementation in bench_first_compile.IMPLEMENTATIONS:
        torch._dynamo.reset()
        seconds = bench_first_compile.first_call_seconds(implementation, 3, "eager")
        assert seconds > 0, implementation


def test_the_custom_optimizer_notebook_shows_the_code_the_benchmark_times(monkeypatch) -> None:
    """``bench_all.py --optimizers adam_atan2`` times the optimizer the notebook writes."""
    import inspect

    import nbformat

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import custom_optimizers

    notebook = nbformat.read(ROOT / "notebooks" / "custom_optimizer.ipynb", as_version=4)
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    for shown in (custom_optimizers.ScaleByAdamAtan2State, custom_optimizers.scale_by_adam_atan2,
                  custom_optimizers.adam_atan2):
        assert inspect.getsource(shown).rstrip() in code


def test_an_iteration_times_its_step_inside_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_iteration

    make = bench_iteration.IMPLEMENTATIONS["TorchOptimizer fused"]("sgd")
    iteration = bench_iteration.Iteration(make, [(2, 3), (4, 1)], set_to_none=True)
    before = [p.detach().clone() for p in iteration.params]
    for _ in range(2):
        iteration()
    assert len(iteration.step_seconds) == 2
    assert all(p.grad is not None for p in iteration.params)  # backward made gradients
    assert not any(torch.equal(p, q) for p, q in zip(iteration.params, before))
