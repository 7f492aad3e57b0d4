"""HoistScalars: small values read by larger ops are computed once, into their own buffer."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from optax_compat._src import inductor_passes


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
    expected = [torch.from_numpy(np.array(y)) for y in jitted(*(a.numpy() for a in args))]
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
