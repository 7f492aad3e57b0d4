"""Solve ``A x = b`` through the normal equations ``A^T A x = A^T b`` by conjugate gradient."""

from __future__ import annotations

import functools
from typing import Any

from torchopt_fn import linalg
from torchopt_fn.linear_solve.utils import (
    MatVec,
    make_normal_matvec,
    make_ridge_matvec,
    make_rmatvec,
)
from torchopt_fn.typing import LinearSolver, TensorTree

__all__ = ["solve_normal_cg"]


def _solve_normal_cg(
    matvec: MatVec,
    b: TensorTree,
    ridge: float | None = None,
    init: TensorTree | None = None,
    **kwargs: Any,
) -> TensorTree:
    """Solves ``(A^T A + ridge I) x = A^T b`` with :func:`torchopt_fn.linalg.cg`."""
    rmatvec = make_rmatvec(matvec, b if init is None else init)
    normal_matvec = make_normal_matvec(matvec)
    if ridge is not None:
        normal_matvec = make_ridge_matvec(normal_matvec, ridge=ridge)
    return linalg.cg(normal_matvec, rmatvec(b), x0=init, **kwargs)


def solve_normal_cg(**kwargs: Any) -> LinearSolver:
    """Returns a solver ``(matvec, b) -> x`` of ``A x = b`` via the normal equations.

    Works for any invertible (square) ``A``, not only hermitian positive definite ones, at the
    price of squaring its condition number.

    Args:
        **kwargs: ``ridge`` (solve ``(A^T A + ridge I) x = A^T b``), ``init`` (the initial guess),
            and the keyword arguments of :func:`torchopt_fn.linalg.cg`.

    Returns:
        The solver function.
    """
    return functools.partial(_solve_normal_cg, **kwargs)
