"""Operators derived from a ``matvec`` closure: transpose, normal equations, ridge, dense matrix."""

from __future__ import annotations

from collections.abc import Callable

import torch

from torchopt_fn import pytree
from torchopt_fn.typing import TensorTree

MatVec = Callable[[TensorTree], TensorTree]
Ravel = Callable[[TensorTree], torch.Tensor]
Unravel = Callable[[torch.Tensor], TensorTree]


def make_rmatvec(matvec: MatVec, example_x: TensorTree) -> MatVec:
    """Returns ``y -> A^T y`` given ``matvec(x) = A x`` and an ``x`` of the right structure."""
    _, vjp_fn = torch.func.vjp(matvec, example_x)
    return lambda y: vjp_fn(y)[0]


def make_normal_matvec(matvec: MatVec) -> MatVec:
    """Returns ``x -> A^T A x`` given ``matvec(x) = A x``."""

    def normal_matvec(x: TensorTree) -> TensorTree:
        ax, vjp_fn = torch.func.vjp(matvec, x)
        return vjp_fn(ax)[0]

    return normal_matvec


def make_ridge_matvec(matvec: MatVec, ridge: float = 0.0) -> MatVec:
    """Returns ``x -> A x + ridge * x`` given ``matvec(x) = A x``."""
    return lambda x: pytree.tree_add_scalar_mul(matvec(x), x, alpha=ridge)


def materialize_matvec(
    matvec: MatVec, example_x: TensorTree,
) -> tuple[torch.Tensor, Ravel, Unravel]:
    """Builds the dense matrix of a linear operator on trees shaped like ``example_x``.

    All leaves are raveled into one vector, so couplings between leaves are kept (TorchOpt keeps
    only the diagonal blocks, which is wrong for operators that mix leaves).

    Returns:
        ``(matrix, ravel, unravel)``: the ``n x n`` matrix acting on raveled vectors, and the maps
        between trees shaped like ``example_x`` and vectors of length ``n``.
    """
    leaves, treespec = pytree.tree_flatten(example_x)
    shapes = [leaf.shape for leaf in leaves]
    sizes = [leaf.numel() for leaf in leaves]

    def ravel(tree: TensorTree) -> torch.Tensor:
        return torch.cat([leaf.reshape(-1) for leaf in treespec.flatten_up_to(tree)])

    def unravel(vector: torch.Tensor) -> TensorTree:
        chunks = torch.split(vector, sizes)
        return pytree.tree_unflatten(
            treespec, [chunk.reshape(shape) for chunk, shape in zip(chunks, shapes, strict=True)])

    basis = torch.eye(sum(sizes), dtype=leaves[0].dtype, device=leaves[0].device)
    # Row i of the vmapped result is A e_i, i.e. column i of A.
    columns = torch.func.vmap(lambda e: ravel(matvec(unravel(e))))(basis)
    return columns.mT, ravel, unravel
