"""power_iteration, matrix_inverse_pth_root and nnls against real Optax."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import assert_leaves_close, jax_precision

DTYPES = [torch.float32, torch.float64]


def spd_matrix(size, dtype, seed=0):
    x = torch.randn(size, size, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return x @ x.T + 0.1 * torch.eye(size, dtype=dtype)


def as_jax(x):
    return jnp.asarray(x.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_power_iteration_with_matrix_and_v0_matches_optax(dtype):
    matrix = spd_matrix(6, dtype)
    v0 = torch.randn(6, generator=torch.Generator().manual_seed(1), dtype=dtype)
    ours = ox.power_iteration(matrix, v0=v0)
    with jax_precision(dtype):
        theirs = optax.power_iteration(as_jax(matrix), v0=as_jax(v0))
    # Each side stops at its own tolerance check, so compare at the tolerance's scale.
    assert_leaves_close(ours, theirs, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_power_iteration_matrix_free_on_a_tree(dtype):
    blocks = {"a": spd_matrix(3, dtype, 2), "b": spd_matrix(2, dtype, 3)}
    v0 = {"a": torch.ones(3, dtype=dtype), "b": torch.ones(2, dtype=dtype)}

    def matvec(v):
        return {name: blocks[name] @ v[name] for name in blocks}

    eigenvalue, eigenvector = ox.power_iteration(matvec, v0=v0, num_iters=500,
                                                 error_tolerance=1e-9)
    largest = max(torch.linalg.eigvalsh(block).max() for block in blocks.values())
    assert float(eigenvalue) == pytest.approx(float(largest), rel=1e-5)
    assert float(ox.tree.norm(eigenvector)) == pytest.approx(1.0, rel=1e-6)
    residual = ox.tree.sub(matvec(eigenvector), ox.tree.scale(eigenvalue, eigenvector))
    assert float(ox.tree.norm(residual)) < 1e-3 * float(largest)


def test_power_iteration_random_start_uses_the_key():
    matrix = spd_matrix(5, torch.float64)
    first = ox.power_iteration(matrix, key=3)
    assert torch.equal(first[1], ox.power_iteration(matrix, key=3)[1])
    eigenvalue, _ = ox.power_iteration(matrix, key=torch.Generator().manual_seed(0))
    expected = float(torch.linalg.eigvalsh(matrix).max())
    assert float(first[0]) == pytest.approx(expected, rel=1e-5)
    assert float(eigenvalue) == pytest.approx(expected, rel=1e-5)


def test_power_iteration_matrix_free_needs_v0():
    with pytest.raises(ValueError, match="v0"):
        ox.power_iteration(lambda v: v)


@pytest.mark.parametrize("dtype,p", [(torch.float32, 2), (torch.float32, 8),
                                     (torch.float64, 1), (torch.float64, 4)])
def test_matrix_inverse_pth_root_matches_optax(dtype, p):
    matrix = spd_matrix(5, dtype)
    ours = ox.matrix_inverse_pth_root(matrix, p)
    with jax_precision(dtype):
        theirs = optax.matrix_inverse_pth_root(as_jax(matrix), p)
    assert_leaves_close(ours[0], theirs[0], rtol={torch.float32: 1e-4, torch.float64: 1e-8})
    root = torch.linalg.matrix_power(ours[0].double(), p) @ matrix.double()
    np.testing.assert_allclose(root.numpy(), np.eye(5), atol=5e-3)


def test_matrix_inverse_pth_root_of_a_one_by_one_matrix():
    ours, error = ox.matrix_inverse_pth_root(torch.tensor([[4.0]]), 2)
    theirs, _ = optax.matrix_inverse_pth_root(jnp.array([[4.0]]), 2)
    assert_leaves_close(ours, theirs)
    assert error == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b_shape", [(7,), (7, 2)])
def test_nnls_matches_optax(dtype, b_shape):
    generator = torch.Generator().manual_seed(4)
    a = torch.randn(7, 4, generator=generator, dtype=dtype)
    b = torch.randn(b_shape, generator=generator, dtype=dtype)
    ours = ox.nnls(a, b, 100)
    with jax_precision(dtype):
        theirs = jax.jit(optax.nnls, static_argnums=2)(as_jax(a), as_jax(b), 100)
    assert_leaves_close(ours, theirs, rtol={torch.float32: 1e-4})
    assert bool((ours >= 0).all())


def test_nnls_docstring_example_and_given_bound():
    a, b = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([5.0, 6.0])
    np.testing.assert_allclose(ox.nnls(a, b, 1000).numpy(), [0.0, 1.7], atol=1e-2)
    bound = float(torch.linalg.eigvalsh(a.T @ a).max())
    np.testing.assert_allclose(ox.nnls(a, b, 1000, L=bound).numpy(), [0.0, 1.7], atol=1e-2)


def test_nnls_checks_shapes():
    with pytest.raises(ValueError, match="shape"):
        ox.nnls(torch.ones(3, 2), torch.ones(4), 10)
