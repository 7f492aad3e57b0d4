"""Hungarian algorithms: the same assignments as Optax, optimal costs as SciPy, clear errors."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from optax_compat import assignment
from optax_compat.testing import jax_precision

SOLVERS = ["hungarian_algorithm", "base_hungarian_algorithm"]
SHAPES = [(1, 1), (2, 5), (5, 2), (4, 4), (6, 3), (3, 8), (8, 8)]


def cost_matrices(shape, dtype, seed=0):
    """Random costs, integer-valued costs with many ties, and a constant matrix."""
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.normal(size=shape)).to(dtype),
            torch.from_numpy(rng.integers(0, 3, size=shape)).to(dtype),
            torch.from_numpy(rng.integers(0, 2, size=shape)).to(dtype),
            torch.ones(shape, dtype=dtype)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", SOLVERS)
def test_same_assignment_as_optax_including_ties(name, shape, dtype):
    import jax
    import jax.numpy as jnp
    import optax

    ours = getattr(assignment, name)
    with jax_precision(dtype):
        theirs = jax.jit(getattr(optax.assignment, name))
        for costs in cost_matrices(shape, dtype):
            i, j = ours(costs)
            their_i, their_j = theirs(jnp.asarray(costs.numpy()))
            assert i.dtype == j.dtype == torch.int64
            np.testing.assert_array_equal(i.numpy(), np.asarray(their_i))
            np.testing.assert_array_equal(j.numpy(), np.asarray(their_j))


@pytest.mark.parametrize("name", SOLVERS)
def test_forbidden_pairs_as_infinity_match_optax(name):
    import jax.numpy as jnp
    import optax

    costs = torch.tensor([[1.0, torch.inf, 3.0], [2.0, 1.0, torch.inf], [torch.inf, 2.0, 2.0],
                          [0.5, torch.inf, torch.inf]])
    for matrix in (costs, costs.T):
        i, j = getattr(assignment, name)(matrix)
        their_i, their_j = getattr(optax.assignment, name)(jnp.asarray(matrix.numpy()))
        np.testing.assert_array_equal(i.numpy(), np.asarray(their_i))
        np.testing.assert_array_equal(j.numpy(), np.asarray(their_j))
        assert torch.isfinite(matrix[i, j]).all()


def test_scenic_variant_without_finite_assignment_matches_optax():
    import jax
    import jax.numpy as jnp
    import optax

    theirs = jax.jit(optax.assignment.hungarian_algorithm)
    rng = np.random.default_rng(1)
    for _ in range(10):
        costs = rng.normal(size=(4, 5)).astype(np.float32)
        costs[rng.random(costs.shape) < 0.7] = np.inf
        for matrix in (costs, costs.T):
            i, j = assignment.hungarian_algorithm(torch.from_numpy(matrix))
            their_i, their_j = theirs(jnp.asarray(matrix))
            np.testing.assert_array_equal(i.numpy(), np.asarray(their_i))
            np.testing.assert_array_equal(j.numpy(), np.asarray(their_j))


@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("n", [0, 1, 2, 4, 8, 16])
@pytest.mark.parametrize("m", [0, 1, 2, 4, 8, 16])
def test_valid_and_optimal_assignment(name, n, m):
    from scipy.optimize import linear_sum_assignment

    costs = torch.randn(n, m, generator=torch.Generator().manual_seed(n * 17 + m),
                        dtype=torch.float64)
    i, j = getattr(assignment, name)(costs)
    size = min(n, m)
    assert i.shape == j.shape == (size,)
    assert i.dtype == j.dtype == torch.int64
    assert ((0 <= i) & (i < n)).all() and ((0 <= j) & (j < m)).all()
    assert len(set(i.tolist())) == size and len(set(j.tolist())) == size
    scipy_i, scipy_j = linear_sum_assignment(costs.numpy())
    np.testing.assert_allclose(costs[i, j].sum().item(), costs.numpy()[scipy_i, scipy_j].sum(),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", SOLVERS)
def test_documented_examples(name):
    solve = getattr(assignment, name)
    costs = torch.tensor([[8, 4, 7], [5, 2, 3], [9, 6, 7], [9, 4, 8]])
    i, j = solve(costs)
    assert costs[i, j].sum().item() == 15
    costs = torch.tensor([[90, 80, 75, 70], [35, 85, 55, 65], [125, 95, 90, 95],
                          [45, 110, 95, 115], [50, 100, 90, 100]])
    i, j = solve(costs)
    assert costs[i, j].sum().item() == 265
    if name == "base_hungarian_algorithm":
        assert i.tolist() == [0, 1, 2, 3] and j.tolist() == [3, 2, 1, 0]


@pytest.mark.parametrize("name", SOLVERS)
def test_inputs_that_require_grad_and_array_likes(name):
    solve = getattr(assignment, name)
    costs = torch.tensor([[4.0, 1.0], [2.0, 3.0]], requires_grad=True)
    for matrix in (costs, costs.tolist(), costs.detach().numpy()):
        i, j = solve(matrix)
        assert sorted(zip(i.tolist(), j.tolist())) == [(0, 1), (1, 0)]


@pytest.mark.parametrize("name", SOLVERS)
def test_bad_input_errors(name):
    solve = getattr(assignment, name)
    with pytest.raises(ValueError, match="2-D"):
        solve(torch.zeros(2, 3, 3))
    with pytest.raises(ValueError, match="NaN"):
        solve(torch.tensor([[1.0, torch.nan], [0.0, 1.0]]))



def test_base_algorithm_raises_where_optax_loops_forever():
    # Optax's while loop never ends on this matrix; Scenic's variant returns an assignment of
    # infinite cost (checked against Optax in test_forbidden_pairs_as_infinity_match_optax).
    with pytest.raises(ValueError, match="finite"):
        assignment.base_hungarian_algorithm(torch.tensor([[1.0, 2.0], [torch.inf, torch.inf]]))


@pytest.mark.parametrize("name", SOLVERS)
def test_signature_matches_optax(name):
    import optax

    ours = inspect.signature(getattr(assignment, name)).parameters
    theirs = inspect.signature(getattr(optax.assignment, name)).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == [
        (p.name, p.kind, p.default) for p in theirs.values()]


@pytest.mark.parametrize("name", SOLVERS)
def test_integer_costs_match_optax(name):
    import jax
    import jax.numpy as jnp
    import optax

    theirs = jax.jit(getattr(optax.assignment, name))
    rng = np.random.default_rng(2)
    for shape in [(3, 5), (5, 3)]:
        for _ in range(3):
            costs = rng.integers(-3, 4, size=shape)
            i, j = getattr(assignment, name)(torch.from_numpy(costs))
            their_i, their_j = theirs(jnp.asarray(costs, dtype=jnp.int32))
            np.testing.assert_array_equal(i.numpy(), np.asarray(their_i))
            np.testing.assert_array_equal(j.numpy(), np.asarray(their_j))
