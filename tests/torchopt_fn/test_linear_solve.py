"""Matrix-free solvers ``solve(matvec, b)`` on pytrees whose leaves are coupled."""

import pytest
import torch

from torchopt_fn import linear_solve

DTYPE = torch.float64
SHAPES = {"w": (3, 2), "b": ()}
SIZE = 7


def _ravel(tree):
    return torch.cat([tree[k].reshape(-1) for k in SHAPES])


def _unravel(vector):
    return {"w": vector[:6].reshape(3, 2), "b": vector[6]}


def _operator(matrix):
    return lambda tree: _unravel(matrix @ _ravel(tree))


def _spd(seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(SIZE, SIZE, generator=gen, dtype=DTYPE)
    return a @ a.T + SIZE * torch.eye(SIZE, dtype=DTYPE)


def _rhs(seed):
    return _unravel(torch.randn(SIZE, generator=torch.Generator().manual_seed(seed), dtype=DTYPE))


def _assert_solves(x, matrix, b, atol=1e-9):
    assert set(x) == set(SHAPES) and all(x[k].shape == SHAPES[k] for k in SHAPES)
    torch.testing.assert_close(_ravel(x), torch.linalg.solve(matrix, _ravel(b)), rtol=0,
                               atol=atol)


@pytest.mark.parametrize("solver", [
    linear_solve.solve_cg(rtol=1e-12),
    linear_solve.solve_normal_cg(rtol=1e-13),
    linear_solve.solve_inv(),
    linear_solve.solve_inv(ns=True, maxiter=2000, alpha=0.02),
], ids=["cg", "normal_cg", "inv", "inv_ns"])
def test_solvers_on_a_coupled_spd_tree_system(solver):
    matrix = _spd(0)
    b = _rhs(1)
    _assert_solves(solver(_operator(matrix), b), matrix, b)


@pytest.mark.parametrize(("solver", "normal"), [
    (linear_solve.solve_cg(ridge=0.5, rtol=1e-12), False),
    (linear_solve.solve_normal_cg(ridge=0.5, rtol=1e-13), True),
    (linear_solve.solve_inv(ridge=0.5), False),
])
def test_ridge_option(solver, normal):
    matrix = _spd(2)
    b = _rhs(3)
    x = solver(_operator(matrix), b)
    ridge = 0.5 * torch.eye(SIZE, dtype=DTYPE)
    if normal:  # (A^T A + ridge I) x = A^T b
        _assert_solves(x, matrix.T @ matrix + ridge, _unravel(matrix.T @ _ravel(b)))
    else:
        _assert_solves(x, matrix + ridge, b)


def test_normal_cg_and_inv_solve_non_symmetric_systems():
    gen = torch.Generator().manual_seed(4)
    matrix = torch.randn(SIZE, SIZE, generator=gen, dtype=DTYPE) + 3 * torch.eye(SIZE, dtype=DTYPE)
    b = _rhs(5)
    _assert_solves(linear_solve.solve_normal_cg(rtol=1e-13, maxiter=500)(_operator(matrix), b),
                   matrix, b, atol=1e-7)
    _assert_solves(linear_solve.solve_inv()(_operator(matrix), b), matrix, b)


def test_initial_guess_is_used():
    matrix = _spd(6)
    b = _rhs(7)
    exact = _unravel(torch.linalg.solve(matrix, _ravel(b)))
    calls = []

    def counting(tree):
        calls.append(1)
        return _operator(matrix)(tree)

    x = linear_solve.solve_cg(init=exact, rtol=1e-8)(counting, b)
    _assert_solves(x, matrix, b)
    assert len(calls) == 1  # only the initial residual: already converged


def test_scalar_system():
    for solver in (linear_solve.solve_cg(), linear_solve.solve_normal_cg(),
                   linear_solve.solve_inv(), linear_solve.solve_inv(ns=True, alpha=0.25)):
        x = solver(lambda v: 4.0 * v, torch.tensor(2.0, dtype=DTYPE))
        assert x.shape == () and float(x) == pytest.approx(0.5)


def test_failures_are_errors():
    singular = torch.zeros(SIZE, SIZE, dtype=DTYPE)
    with pytest.raises(RuntimeError):
        linear_solve.solve_inv()(_operator(singular), _rhs(0))
    with pytest.raises(RuntimeError, match="did not converge"):
        linear_solve.solve_cg(maxiter=1)(_operator(_spd(0)), _rhs(0))
    with pytest.raises(RuntimeError, match="spectral radius"):
        linear_solve.solve_inv(ns=True)(_operator(_spd(0)), _rhs(0))
    with pytest.raises(TypeError, match="maxiter"):
        linear_solve.solve_inv(maxiter=3)(_operator(_spd(0)), _rhs(0))
