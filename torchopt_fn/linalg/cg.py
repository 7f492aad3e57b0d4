"""Conjugate gradient iteration to solve ``A x = b`` for a hermitian positive definite ``A``."""

from __future__ import annotations

from collections.abc import Callable

import torch

from torchopt_fn import pytree
from torchopt_fn._functorch_state import vmap_active
from torchopt_fn.linalg.utils import (
    check_same_shapes,
    normalize_matvec,
    power_of_two_scale,
    report_failure,
    tree_axpy,
    tree_scale,
    tree_size,
    tree_vdot,
)
from torchopt_fn.typing import TensorTree

__all__ = ["cg"]


def cg(
    A: TensorTree | Callable[[TensorTree], TensorTree],
    b: TensorTree,
    x0: TensorTree | None = None,
    *,
    rtol: float = 1e-5,
    atol: float = 0.0,
    maxiter: int | None = None,
    M: TensorTree | Callable[[TensorTree], TensorTree] | None = None,
    check_convergence: bool = True,
) -> TensorTree:
    """Solves ``A x = b`` by the (preconditioned) conjugate gradient method.

    The tolerance follows SciPy's non-legacy ``scipy.sparse.linalg.cg``: the iteration stops once
    ``norm(residual) <= max(rtol * norm(b), atol)``. Gradients flow through the iterations.

    Unlike TorchOpt, a solve that has not reached the tolerance after ``maxiter`` iterations is an
    error rather than a silently inaccurate answer (pass ``check_convergence=False`` to accept a
    deliberately truncated solve). Under ``torch.func.vmap`` the loop runs for ``maxiter``
    iterations with converged members of the batch frozen, and members that did not converge get
    NaN solutions, since an exception cannot depend on batched values.

    Reference: Hestenes & Stiefel, "Methods of conjugate gradients for solving linear systems",
    1952.

    Args:
        A: The operator: a function ``x -> A x`` returning a tree like ``x``, or a tree of square
            matrices (one per leaf, a block-diagonal operator). Must be hermitian positive definite.
        b: The right-hand side, a tensor or a tree of tensors of any shapes.
        x0: The initial guess, structured like ``b``; zeros if ``None``.
        rtol: Relative tolerance on the residual norm.
        atol: Absolute tolerance on the residual norm.
        maxiter: Maximum number of iterations; ``10 * size(b)`` if ``None`` (the number of
            elements, so that 0-d systems get iterations too).
        M: A preconditioner approximating ``A^{-1}``, as a function or a tree of matrices.
        check_convergence: Whether to raise if the tolerance is not reached within ``maxiter``.

    Returns:
        The solution, structured like ``b``.

    Raises:
        ValueError: If ``x0`` and ``b`` differ in structure or shapes.
        RuntimeError: If ``check_convergence`` and the residual is above the tolerance.
    """
    x0 = pytree.tree_map(torch.zeros_like, b) if x0 is None else x0
    check_same_shapes(x0, b, "x0", "b")
    maxiter = 10 * tree_size(b) if maxiter is None else maxiter
    matvec = normalize_matvec(A)
    precondition = None if M is None else normalize_matvec(M)

    # Iterating on b / scale (an exact power of two) keeps the squared norms of tiny or huge
    # right-hand sides from underflowing or overflowing; the solution scales back exactly.
    scale = power_of_two_scale(b)
    x, residual_sq, tolerance_sq = _cg_iterate(
        matvec, tree_scale(b, 1 / scale), tree_scale(x0, 1 / scale), maxiter, rtol, atol / scale,
        precondition)
    x = tree_scale(x, scale)
    if not check_convergence:
        return x
    return report_failure(
        x, residual_sq <= tolerance_sq,
        lambda: (f"cg did not converge: residual norm {float(residual_sq.sqrt() * scale):.3e} is "
                 f"above the tolerance {float(tolerance_sq.sqrt() * scale):.3e} after {maxiter} "
                 "iterations. "
                 "Check that A is hermitian positive definite, raise maxiter or rtol/atol, or pass "
                 "check_convergence=False to accept a truncated solve."))


def _cg_iterate(
    matvec: Callable[[TensorTree], TensorTree],
    b: TensorTree,
    x: TensorTree,
    maxiter: int,
    rtol: float,
    atol: torch.Tensor,
    precondition: Callable[[TensorTree], TensorTree] | None,
) -> tuple[TensorTree, torch.Tensor, torch.Tensor]:
    """Runs CG from ``x``; returns the iterate, its squared residual norm and the squared tolerance.

    Outside ``vmap`` the loop stops as soon as the tolerance is met (one host synchronisation per
    iteration, as in TorchOpt and SciPy). Under ``vmap`` it runs ``maxiter`` iterations and the
    updates of converged members are masked to zero.
    """
    tolerance_sq = torch.maximum(tree_vdot(b, b) * rtol**2, atol.square())
    residual = pytree.tree_sub(b, matvec(x))
    z = residual if precondition is None else precondition(residual)
    direction = z
    gamma = tree_vdot(residual, z)
    batched = vmap_active()

    def residual_norm_sq() -> torch.Tensor:
        return gamma if precondition is None else tree_vdot(residual, residual)

    for _ in range(maxiter):
        active = residual_norm_sq() > tolerance_sq
        if not batched and not bool(active):
            break
        a_direction = matvec(direction)
        curvature = tree_vdot(direction, a_direction)
        step = torch.where(active, gamma / torch.where(active, curvature, 1), 0)
        x = tree_axpy(step, direction, x)
        residual = tree_axpy(-step, a_direction, residual)
        z = residual if precondition is None else precondition(residual)
        gamma_next = tree_vdot(residual, z)
        beta = torch.where(active, gamma_next / torch.where(active, gamma, 1), 0)
        direction = tree_axpy(beta, direction, z)
        gamma = gamma_next
    return x, residual_norm_sq(), tolerance_sq
