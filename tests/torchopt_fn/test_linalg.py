"""Conjugate gradient and Neumann series on random systems, pytree-shaped."""

import optree
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from optax_compat.testing import strategies
from torchopt_fn.linalg import cg, ns, ns_inv

DTYPE = torch.float64


def random_spd(n: int, seed: int, min_eig: float = 1.0, max_eig: float = 10.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=DTYPE))
    eigenvalues = torch.linspace(min_eig, max_eig, n, dtype=DTYPE)
    return q @ torch.diag(eigenvalues) @ q.T


def coupled_operator(b_tree, seed: int, min_eig: float, max_eig: float):
    """A random SPD matrix acting on all the leaves of trees shaped like ``b_tree`` at once."""
    leaves, treespec = optree.tree_flatten(b_tree)
    sizes = [leaf.numel() for leaf in leaves]
    matrix = random_spd(sum(sizes), seed, min_eig, max_eig)

    def ravel(tree):
        return torch.cat([leaf.reshape(-1) for leaf in treespec.flatten_up_to(tree)])

    def unravel(vector):
        chunks = vector.split(sizes)
        return optree.tree_unflatten(treespec, [c.reshape(leaf.shape)
                                                for c, leaf in zip(chunks, leaves)])

    return (lambda tree: unravel(matrix @ ravel(tree))), matrix, ravel


@settings(max_examples=20)
@given(b=strategies.pytrees(dtypes=(DTYPE,), max_leaves=4), seed=st.integers(0, 2**16),
       condition=st.floats(1.0, 1e3))
def test_cg_solves_random_spd_tree_systems(b, seed, condition):
    matvec, matrix, ravel = coupled_operator(b, seed, 1.0, condition)
    x = cg(matvec, b, rtol=1e-10)
    assert optree.tree_structure(x) == optree.tree_structure(b)
    residual = torch.linalg.vector_norm(matrix @ ravel(x) - ravel(b))
    assert residual <= 1e-10 * torch.linalg.vector_norm(ravel(b)) * 1.0001


def test_cg_with_a_tree_of_matrices_preconditioner_and_initial_guess():
    blocks = {"u": random_spd(3, 0), "v": random_spd(5, 1, 0.1, 100.0)}
    b = {"u": torch.randn(3, dtype=DTYPE), "v": torch.randn(5, dtype=DTYPE)}
    expected = {k: torch.linalg.solve(blocks[k], b[k]) for k in b}
    jacobi = {k: torch.diag(1 / torch.diagonal(m)) for k, m in blocks.items()}
    for kwargs in ({}, {"M": jacobi}, {"x0": {k: torch.ones_like(v) for k, v in b.items()}}):
        x = cg(blocks, b, rtol=1e-12, **kwargs)
        for k in b:
            torch.testing.assert_close(x[k], expected[k], rtol=1e-9, atol=1e-10)


def test_cg_on_a_hermitian_complex_system():
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(4, 4, generator=gen, dtype=torch.complex128)
    matrix = a @ a.mH + 4 * torch.eye(4, dtype=torch.complex128)
    b = torch.randn(4, generator=gen, dtype=torch.complex128)
    torch.testing.assert_close(cg(matrix, b, rtol=1e-12),
                               torch.linalg.solve(matrix, b), rtol=1e-9, atol=1e-10)


def test_cg_default_maxiter_counts_elements_so_scalars_are_solved():
    # TorchOpt used the sum of the shapes (0 for a 0-d tensor): no iteration, x = 0.
    assert float(cg(lambda x: 4.0 * x, torch.tensor(2.0, dtype=DTYPE))) == pytest.approx(0.5)


def test_cg_handles_tiny_and_huge_right_hand_sides():
    # Squared norms of 1e-200 underflow (and of 1e200 overflow) in float64: CG works on b scaled
    # by a power of two.
    matrix = random_spd(3, 0)
    for magnitude in (1e-200, 1e200):
        b = magnitude * torch.tensor([1.0, -2.0, 0.5], dtype=DTYPE)
        torch.testing.assert_close(cg(matrix, b, rtol=1e-12), torch.linalg.solve(matrix, b),
                                   rtol=1e-9, atol=0)
        with pytest.raises(RuntimeError, match="did not converge"):
            cg(matrix, b, maxiter=1)


def test_cg_raises_when_not_converged_unless_asked_not_to():
    matrix = random_spd(10, 0, 1.0, 1e4)
    b = torch.ones(10, dtype=DTYPE)
    with pytest.raises(RuntimeError, match="did not converge"):
        cg(matrix, b, maxiter=3)
    truncated = cg(matrix, b, maxiter=3, check_convergence=False)
    assert torch.isfinite(truncated).all()
    # Indefinite: the first curvature p^T A p is 0, CG breaks down and the check catches it.
    with pytest.raises(RuntimeError, match="did not converge"):
        cg(-torch.eye(3, dtype=DTYPE) + torch.diag(torch.tensor([0.0, 0.0, 3.0], dtype=DTYPE)),
           torch.ones(3, dtype=DTYPE))


def test_cg_input_checks():
    with pytest.raises(ValueError, match="shape"):
        cg(torch.eye(3), torch.ones(3), x0=torch.ones(4))
    with pytest.raises(ValueError, match="structure"):
        cg(lambda x: x, {"a": torch.ones(3)}, x0={"b": torch.ones(3)})
    with pytest.raises(TypeError, match="square matrix"):
        cg(torch.ones(2, 3), torch.ones(3))


def test_cg_under_vmap_matches_the_loop_and_poisons_failures():
    matrix = random_spd(6, 5)
    bs = torch.randn(4, 6, dtype=DTYPE)
    batched = torch.func.vmap(lambda b: cg(lambda x: matrix @ x, b, rtol=1e-12))(bs)
    torch.testing.assert_close(batched, torch.linalg.solve(matrix, bs.T).T, rtol=1e-9, atol=1e-10)
    # A zero right-hand side converges at once while the others are still iterating.
    bs[1] = 0
    batched = torch.func.vmap(lambda b: cg(lambda x: matrix @ x, b, maxiter=2))(bs)
    assert torch.isnan(batched[0]).all() and (batched[1] == 0).all()


def test_cg_is_differentiable_through_its_iterations():
    matrix = random_spd(4, 7)
    b = torch.randn(4, dtype=DTYPE, requires_grad=True)
    (grad,) = torch.autograd.grad(cg(matrix, b, rtol=1e-12).sum(), b)
    torch.testing.assert_close(grad, torch.linalg.solve(matrix, torch.ones(4, dtype=DTYPE)),
                               rtol=1e-8, atol=1e-10)


@settings(max_examples=15)
@given(b=strategies.pytrees(dtypes=(DTYPE,), max_leaves=4, min_value=-1, max_value=1),
       seed=st.integers(0, 2**16), max_eig=st.floats(1.5, 20.0))
def test_ns_converges_when_the_spectral_radius_allows(b, seed, max_eig):
    matvec, matrix, ravel = coupled_operator(b, seed, 1.0, max_eig)
    alpha = 1.0 / max_eig  # spectral radius of I - alpha A is 1 - 1 / max_eig
    x = ns(matvec, b, int(40 * max_eig), alpha=alpha)
    error = torch.linalg.vector_norm(ravel(x) - torch.linalg.solve(matrix, ravel(b)))
    assert error <= 1e-8 * torch.linalg.vector_norm(ravel(b)) + 1e-300


def test_ns_default_alpha_and_tree_of_matrices():
    blocks = {"u": random_spd(3, 0, 0.5, 1.5), "v": random_spd(2, 1, 0.8, 1.2)}
    b = {"u": torch.randn(3, dtype=DTYPE), "v": torch.randn(2, dtype=DTYPE)}
    x = ns(blocks, b, maxiter=200)
    for k in b:
        torch.testing.assert_close(x[k], torch.linalg.solve(blocks[k], b[k]))


def test_ns_says_so_when_the_series_diverges():
    matrix = random_spd(4, 0, 1.0, 5.0)  # I - A has eigenvalue -4: spectral radius 4
    with pytest.raises(RuntimeError, match="spectral radius"):
        ns(matrix, torch.ones(4, dtype=DTYPE))
    with pytest.raises(RuntimeError, match="spectral radius"):
        ns(lambda x: matrix @ x, torch.ones(4, dtype=DTYPE), alpha=0.5)  # 1 - 0.5 * 5 = -1.5
    with pytest.raises(RuntimeError, match="spectral radius"):
        ns_inv(matrix)
    diverging = torch.func.vmap(lambda b: ns(matrix, b))(torch.ones(2, 4, dtype=DTYPE))
    assert torch.isnan(diverging).all()


def test_ns_handles_tiny_and_huge_right_hand_sides():
    matrix = random_spd(3, 0, 0.5, 1.5)
    for magnitude in (1e-200, 1e200):
        b = magnitude * torch.tensor([1.0, -2.0, 0.5], dtype=DTYPE)
        torch.testing.assert_close(ns(matrix, b, maxiter=200), torch.linalg.solve(matrix, b),
                                   rtol=1e-9, atol=0)


def test_ns_inv_approximates_the_inverse():
    matrices = {"a": random_spd(4, 0, 1.0, 5.0), "b": random_spd(2, 1, 0.5, 1.5)}
    inverses = ns_inv(matrices, maxiter=300, alpha=0.3)
    for k, m in matrices.items():
        torch.testing.assert_close(inverses[k], torch.linalg.inv(m))
    default = ns_inv(matrices["b"], maxiter=200)
    torch.testing.assert_close(default, torch.linalg.inv(matrices["b"]))
    with pytest.raises(ValueError, match="square"):
        ns_inv(torch.ones(2, 3))
