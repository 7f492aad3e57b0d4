"""Solve ``A x = b`` by conjugate gradient, for a hermitian positive definite ``A``."""

from __future__ import annotations

import functools
from typing import Any

from torchopt_fn import linalg
from torchopt_fn.linear_solve.utils import MatVec, make_ridge_matvec
from torchopt_fn.typing import LinearSolver, TensorTree

__all__ = ["solve_cg"]


def _solve_cg(
    matvec: MatVec,
    b: TensorTree,
    ridge: float | None = None,
    init: TensorTree | None = None,
    **kwargs: Any,
) -> TensorTree:
    """Solves ``(A + ridge I) x = b`` with :func:`torchopt_fn.linalg.cg` started from ``init``."""
    if ridge is not None:
        matvec = make_ridge_matvec(matvec, ridge=ridge)
    return linalg.cg(matvec, b, x0=init, **kwargs)


def solve_cg(**kwargs: Any) -> LinearSolver:
    """Returns a solver ``(matvec, b) -> x`` of ``A x = b`` by conjugate gradient.

    ``A`` (given by ``matvec(x) = A x``) must be hermitian positive definite.

    Args:
        **kwargs: ``ridge`` (solve ``(A + ridge I) x = b`` instead), ``init`` (the initial guess,
            zeros by default), and the keyword arguments of :func:`torchopt_fn.linalg.cg`
            (``rtol``, ``atol``, ``maxiter``, ``M``, ``check_convergence``).

    Returns:
        The solver function.
    """
    return functools.partial(_solve_cg, **kwargs)
