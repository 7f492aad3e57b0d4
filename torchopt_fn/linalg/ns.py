"""Neumann series approximations of ``A^{-1} b`` and ``A^{-1}``.

``A^{-1} = alpha * sum_k (I - alpha A)^k``, which converges if and only if the spectral radius of
``I - alpha A`` is below one (for a symmetric positive definite ``A``:
``0 < alpha < 2 / lambda_max``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from torchopt_fn import pytree
from torchopt_fn.linalg.utils import (
    normalize_matvec,
    power_of_two_scale,
    report_failure,
    tree_scale,
    tree_vdot,
)
from torchopt_fn.typing import TensorTree

__all__ = ["ns", "ns_inv"]

_DIVERGENCE_HINT = ("the spectral radius of I - alpha * A is at least 1, so the Neumann series "
                    "does not converge; pass an alpha with 0 < alpha < 2 / lambda_max(A)")


def ns(
    A: TensorTree | Callable[[TensorTree], TensorTree],
    b: TensorTree,
    maxiter: int | None = None,
    *,
    alpha: float | None = None,
) -> TensorTree:
    """Approximates the solution of ``A x = b`` by a truncated Neumann series.

    Computes ``alpha * sum_{k=0}^{maxiter} (I - alpha A)^k b``. The terms of the series shrink
    geometrically when it converges; if the last term is not smaller than the one before it, the
    spectral radius of ``I - alpha A`` is at least one (for symmetric ``A``) and this raises
    instead of returning a meaningless sum (under ``vmap``: NaN solutions).

    Reference: Lorraine et al., "Optimizing Millions of Hyperparameters by Implicit
    Differentiation", AISTATS 2020.

    Args:
        A: The operator: a function ``x -> A x`` or a tree of square matrices, one per leaf.
        b: The right-hand side, a tensor or a tree of tensors.
        maxiter: The number of terms after the first; 10 if ``None``.
        alpha: The step ``alpha`` of the series; 1 if ``None``.

    Returns:
        The approximate solution, structured like ``b``.

    Raises:
        RuntimeError: If the terms of the series stop shrinking.
    """
    maxiter = 10 if maxiter is None else maxiter
    step = 1.0 if alpha is None else alpha
    matvec = normalize_matvec(A)
    scale = power_of_two_scale(b)  # as in cg: keeps the squared norms of the terms finite
    term = total = tree_scale(b, 1 / scale)
    previous_sq = last_sq = tree_vdot(term, term)
    for _ in range(maxiter):
        previous_sq = last_sq
        term = pytree.tree_map(lambda v, av: v - step * av, term, matvec(term))
        total = pytree.tree_add(total, term)
        last_sq = tree_vdot(term, term)
    total = tree_scale(total, step * scale)
    if maxiter == 0:
        return total
    shrinking = (last_sq < previous_sq) | (previous_sq == 0)
    return report_failure(total, shrinking, lambda: f"ns: {_DIVERGENCE_HINT}.")


def ns_inv(
    A: TensorTree,
    maxiter: int | None = None,
    *,
    alpha: float | None = None,
) -> TensorTree:
    """Approximates the inverse of each matrix of a tree by a truncated Neumann series.

    Computes ``alpha * sum_{k=0}^{maxiter-1} (I - alpha A)^k`` for every leaf, and raises if the
    last term's Frobenius norm is not smaller than the previous one's (see :func:`ns`).

    Args:
        A: A square matrix or a tree of square matrices.
        maxiter: The number of terms; 10 if ``None``.
        alpha: The step ``alpha`` of the series; 1 if ``None``.

    Returns:
        The approximate inverses, structured like ``A``.

    Raises:
        ValueError: If a leaf is not a square matrix.
        RuntimeError: If the terms of a series stop shrinking.
    """
    maxiter = 10 if maxiter is None else maxiter
    step = 1.0 if alpha is None else alpha
    return pytree.tree_map(lambda matrix: _ns_inv_matrix(matrix, maxiter, step), A)


def _ns_inv_matrix(matrix: torch.Tensor, maxiter: int, step: float) -> torch.Tensor:
    """The Neumann series approximation of the inverse of one square matrix."""
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"ns_inv needs square matrices, got shape {tuple(matrix.shape)}.")
    if maxiter == 0:
        return torch.zeros_like(matrix)
    identity = torch.eye(matrix.shape[0], dtype=matrix.dtype, device=matrix.device)
    contraction = identity - step * matrix
    term = total = identity
    previous_norm = last_norm = torch.linalg.matrix_norm(identity)
    for _ in range(maxiter - 1):
        term = contraction @ term
        total = total + term
        previous_norm, last_norm = last_norm, torch.linalg.matrix_norm(term)
    if maxiter == 1:
        return step * total
    shrinking = (last_norm < previous_norm) | (previous_norm == 0)
    return report_failure(step * total, shrinking, lambda: f"ns_inv: {_DIVERGENCE_HINT}.")
