"""Solve ``A x = b`` by a dense solve of the materialized matrix or by a Neumann series."""

from __future__ import annotations

import functools
from typing import Any

import torch

from torchopt_fn import linalg
from torchopt_fn.linear_solve.utils import MatVec, make_ridge_matvec, materialize_matvec
from torchopt_fn.typing import LinearSolver, TensorTree

__all__ = ["solve_inv"]


def _solve_inv(
    matvec: MatVec,
    b: TensorTree,
    ridge: float | None = None,
    ns: bool = False,
    **kwargs: Any,
) -> TensorTree:
    """Solves ``(A + ridge I) x = b`` densely, or by :func:`torchopt_fn.linalg.ns` if ``ns``."""
    if ridge is not None:
        matvec = make_ridge_matvec(matvec, ridge=ridge)
    if ns:
        return linalg.ns(matvec, b, **kwargs)
    if kwargs:
        raise TypeError(f"solve_inv(ns=False) takes no solver options, got {sorted(kwargs)}.")
    matrix, ravel, unravel = materialize_matvec(matvec, b)
    return unravel(torch.linalg.solve(matrix, ravel(b)))


def solve_inv(**kwargs: Any) -> LinearSolver:
    """Returns a solver ``(matvec, b) -> x`` of ``A x = b`` by matrix inversion.

    With ``ns=False`` the matrix of ``A`` over all the leaves of ``b`` is materialized (one
    ``matvec`` per element of ``b``) and solved with :func:`torch.linalg.solve`, which raises on a
    singular matrix. With ``ns=True`` the Neumann series :func:`torchopt_fn.linalg.ns` is used.

    Args:
        **kwargs: ``ridge`` (solve ``(A + ridge I) x = b``), ``ns`` (use the Neumann series), and
            with ``ns=True`` the keyword arguments of :func:`torchopt_fn.linalg.ns` (``maxiter``,
            ``alpha``).

    Returns:
        The solver function.
    """
    return functools.partial(_solve_inv, **kwargs)
