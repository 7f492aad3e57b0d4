"""HoistScalars: small values read by larger ops are computed once, into their own buffer."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import optax_compat
from optax_compat._runtime import inductor_passes


def _step(x: torch.Tensor, rows: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """A per-row factor and a scalar read by a matrix, and a same-size elementwise chain."""
    factor = torch.rsqrt(rows * 2.0).unsqueeze(1)  # (4,) computed, then a view of it
    scale = 1.0 - 0.9 ** count  # 0-d, computed from 0-d values
    return (x * 3.0 + 1.0) * factor * scale


def _hoisted(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [node for node in graph.nodes
            if node.target is torch.ops.optax_compat.computed_scalar.default]


def test_small_computed_values_are_hoisted_views_and_same_size_chains_are_not():
    args = (torch.randn(4, 8), torch.rand(4) + 0.5, torch.tensor(3.0))
    module = make_fx(_step, tracing_mode="fake")(*args)
    inductor_passes.HoistScalars()(module.graph)
    module.recompile()
    hoisted = _hoisted(module.graph)
    sources = {node.args[0].target for node in hoisted}
    # The per-row rsqrt (read by the matrix through its unsqueeze) and the 0-d scale, once.
    assert torch.ops.aten.rsqrt.default in sources
    assert torch.ops.aten.rsub.Scalar in sources  # 1 - 0.9 ** count, not its 0-d input
    assert len(hoisted) == 2
    # Nothing of the matrix's own (4, 8) elementwise chain is hoisted.
    assert all(node.args[0].meta["val"].numel() < 32 for node in hoisted)
    # The unsqueeze now views the hoisted copy.
    unsqueeze = next(node for node in module.graph.nodes
                     if node.target is torch.ops.aten.unsqueeze.default)
    assert unsqueeze.args[0] in hoisted
    torch.testing.assert_close(module(*args), _step(*args), rtol=0, atol=0)


def _foreach_step(a: torch.Tensor, b: torch.Tensor, count: torch.Tensor) -> list[torch.Tensor]:
    """A 0-d scale read by a foreach kernel, as the flat layout's Adam reads its corrections."""
    return torch._foreach_mul([a, b], torch.sqrt(1.0 - 0.999 ** count))


def test_scalars_read_by_a_foreach_kernel_are_hoisted():
    """A foreach op's value is a list of tensors; it reads the scalar into all of them (missing
    this made the flat Adam step evaluate ``pow``/``sqrt`` at every vector, 2.5x slower)."""
    args = (torch.randn(8), torch.randn(3, 4), torch.tensor(3.0))
    module = make_fx(_foreach_step, tracing_mode="fake")(*args)
    inductor_passes.HoistScalars()(module.graph)
    module.recompile()
    hoisted = _hoisted(module.graph)
    assert [node.args[0].target for node in hoisted] == [torch.ops.aten.sqrt.default]
    foreach = next(node for node in module.graph.nodes
                   if node.target is torch.ops.aten._foreach_mul.Tensor)
    assert foreach.args[1] is hoisted[0]
    for got, expected in zip(module(*args), _foreach_step(*args), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def _divisions(x: torch.Tensor, rows: torch.Tensor, count: torch.Tensor,
               ) -> tuple[torch.Tensor, ...]:
    """Divisions by a 0-d value, by a per-row value, and by a value of the dividend's size."""
    return x / (count * 0.5 + 1.0), x / rows.unsqueeze(1), x / (x.abs() + 1.0)


def test_divisions_by_broadcast_values_multiply_by_reciprocals_as_xla_does():
    """XLA rewrites ``x / s`` with ``s`` broadcast as ``x * (1 / s)``: the pass makes the same
    rewrite, which gives jitted Optax's numbers bit for bit and takes the divisions out of the
    loop; a division by a value of the dividend's own size stays a division."""
    jax = pytest.importorskip("jax")
    with torch.device("cpu"):  # the pass runs on graphs for the CPU's C++ code
        args = (torch.randn(64, 32), torch.rand(64) + 0.5, torch.tensor(3.0))
    module = make_fx(_divisions, tracing_mode="fake")(*args)
    inductor_passes.HoistScalars()(module.graph)
    module.recompile()
    targets = [node.target for node in module.graph.nodes]
    assert targets.count(torch.ops.aten.div.Tensor) == 1
    assert targets.count(torch.ops.aten.reciprocal.default) == 2
    hoisted = {node.args[0].target for node in _hoisted(module.graph)}
    assert hoisted == {torch.ops.aten.reciprocal.default}
    jitted = jax.jit(lambda x, rows, count: (x / (count * 0.5 + 1.0), x / rows[:, None],
                                             x / (jax.numpy.abs(x) + 1.0)))
    expected = [torch.from_numpy(np.array(y)) for y in jitted(*(a.cpu().numpy() for a in args))]
    for got, jax_value in zip(module(*args), expected, strict=True):
        torch.testing.assert_close(got, jax_value, rtol=0, atol=0)
    # An exact division by a broadcast value rounds otherwise.
    assert not torch.equal(_divisions(*args)[1], expected[1])


def test_a_consumer_nests_with_its_producer_only_when_it_reads_within_each_leaf():
    """``per_leaf_loops`` lets a consumer join its producer's loop over the leaves when, for
    each leaf, it reads only what the producer writes for that leaf (the producer's work for a
    leaf runs first); a read that reaches into another leaf keeps them apart."""
    from torch._inductor.dependencies import MemoryDep
    from torch.utils._sympy.functions import FloorDiv

    leaf, row, col = sympy.symbols("c0 c1 c2", integer=True, nonnegative=True)
    flat = sympy.Symbol("c0", integer=True, nonnegative=True)
    # Column factors written densely, their loops merged: 200 leaves of 400 values.
    write = MemoryDep("factors", flat, (flat,), (sympy.Integer(80000),))
    per_leaf = MemoryDep("factors", 400 * leaf + col, (leaf, col), (200, 400))

    def read(index):
        return MemoryDep("factors", index, (leaf, row, col), (200, 400, 400))

    within = inductor_passes._within_one_leaf
    assert within(read(400 * leaf + col), write, 200)  # broadcast over the rows
    assert within(read(400 * leaf + col), per_leaf, 200)
    assert not within(read(400 * leaf + col + 1), write, 200)  # reaches the next leaf
    assert not within(read(leaf + 200 * col), write, 200)  # leaves interleaved
    assert not within(read(400 * leaf + FloorDiv(row, 2)), write, 200)
    assert not within(read(400 * leaf + col), write, 100)  # another loop over the leaves
    assert not within(MemoryDep("other", 400 * leaf + col, (leaf, row, col), (200, 400, 400)),
                      write, 200)


@pytest.fixture
def warnings_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The passes warn as if for the first time in this process; their record of what they
    warned about is restored afterwards."""
    monkeypatch.setattr(inductor_passes, "_warned", set())


def _sm3_params(compile_with: str | None) -> tuple[list[torch.Tensor], list[str]]:
    """The params after two stacked SM3 steps compiled with ``compile_with`` (``None``:
    eagerly), and the messages of the warnings the fused step issued."""
    generator = torch.Generator().manual_seed(0)  # on the CPU: the passes are C++ codegen's
    params = {"b": torch.randn(5, generator=generator, device="cpu"),
              **{f"w{i}": torch.randn(6, 5, generator=generator, device="cpu")
                 for i in range(3)}}
    step = optax_compat.fused_step(optax_compat.sm3(1e-2), params, backend=compile_with)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            step({name: torch.randn(p.shape, generator=generator, device="cpu")
                  for name, p in params.items()})
    ours = [str(w.message) for w in caught if "optax_compat.fused_step" in str(w.message)]
    return list(params.values()), ours


def _compiled_sm3_messages() -> list[str]:
    """The warnings of two stacked SM3 steps compiled here with Inductor (caches off, so not
    read from the cache), after checking that they give the eager steps' numbers."""
    from torch._inductor import config

    expected, _ = _sm3_params(None)
    with config.patch(force_disable_caches=True):
        got, messages = _sm3_params("inductor")
    for got_leaf, expected_leaf in zip(got, expected, strict=True):
        torch.testing.assert_close(got_leaf, expected_leaf)
    return messages


def _with_signature_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor's ``select_tiling`` gains a parameter, as a later PyTorch might give it."""
    from torch._inductor.codegen import cpp

    select_tiling = cpp.TilingSelect.select_tiling

    def widened(self, fn_list, var_sizes_list, vec_dtype=None):
        return select_tiling(self, fn_list, var_sizes_list)

    monkeypatch.setattr(cpp.TilingSelect, "select_tiling", widened)


def _with_method_renamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The method we replace for ``select_tiling`` is looked for under a name this Inductor
    lacks, as if a later PyTorch had renamed it."""
    renamed = [entry._replace(target=entry.target.replace("select_tiling", "choose_tiling"))
               for entry in inductor_passes._REPLACEMENTS]
    monkeypatch.setattr(inductor_passes, "_REPLACEMENTS", tuple(renamed))


@pytest.mark.parametrize(("mismatch", "reason"), [
    (_with_signature_changed, "select_tiling takes (self, fn_list, var_sizes_list, vec_dtype)"),
    (_with_method_renamed, "cpp.TilingSelect.choose_tiling is missing"),
], ids=["signature_changed", "method_renamed"])
def test_internals_of_another_shape_cost_one_optimization_and_one_warning(
        mismatch, reason, monkeypatch, warnings_afresh):
    """Where Inductor's internals differ from what a replacement expects, that replacement is
    not installed: the step compiles without it, gives the same numbers, and warns once per
    process naming what it loses; the other replacements are installed as usual."""
    from torch._inductor import scheduler
    from torch._inductor.codegen import cpp

    mismatch(monkeypatch)
    messages = _compiled_sm3_messages()
    assert len(messages) == 1, messages
    assert reason in messages[0] and "scalar loops for per-leaf values" in messages[0]
    select_tiling = cpp.TilingSelect.select_tiling
    score = scheduler.Scheduler._score_fusion_memory_for_can_fuse
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with inductor_passes.per_leaf_loops():
            assert cpp.TilingSelect.select_tiling is select_tiling  # not replaced
            assert scheduler.Scheduler._score_fusion_memory_for_can_fuse is not score
    assert not caught  # warned once per process, not per compilation


def test_a_pass_that_raises_falls_back_to_stock_inductor_with_one_warning(
        monkeypatch, warnings_afresh):
    """Should one of our replacements raise inside Inductor (internals changed in a way the
    checks cannot see), the step compiles with stock Inductor: same numbers, one warning."""

    def broken(node1, node2):
        raise AttributeError("'SchedulerNode' object has no attribute 'read_writes'")

    monkeypatch.setattr(inductor_passes, "_touch_a_common_buffer", broken)
    messages = _compiled_sm3_messages()
    assert len(messages) == 1, messages
    assert "stock Inductor" in messages[0] and "read_writes" in messages[0]


@pytest.fixture
def passes_unloadable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Importing our passes fails, as it would where Inductor's private modules moved; the
    fused engine's record of the import is emptied before and after."""
    import sys

    import optax_compat._runtime as runtime
    from optax_compat._runtime import fused

    monkeypatch.delattr(runtime, "inductor_passes")
    monkeypatch.setitem(sys.modules, "optax_compat._runtime.inductor_passes", None)
    fused._inductor_passes.cache_clear()
    yield
    fused._inductor_passes.cache_clear()


def test_passes_that_cannot_load_leave_stock_inductor_with_one_warning(passes_unloadable):
    """Where our passes cannot even be imported, fused steps compile with stock Inductor:
    same numbers, one warning, no exception."""
    messages = _compiled_sm3_messages()
    assert len(messages) == 1 and "cannot load" in messages[0], messages
    assert _compiled_sm3_messages() == []
