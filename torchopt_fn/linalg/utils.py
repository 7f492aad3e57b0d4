"""Helpers shared by the linear algebra routines: operators, inner products, failure reporting."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from optax_compat._runtime import tree_math
from torchopt_fn import pytree
from torchopt_fn._functorch_state import vmap_active
from torchopt_fn.typing import TensorTree


def tree_size(tree: TensorTree) -> int:
    """The total number of elements of the leaves of ``tree``."""
    return sum(leaf.numel() for leaf in pytree.tree_leaves(tree))


def tree_vdot(tree_x: TensorTree, tree_y: TensorTree) -> torch.Tensor:
    """``Re(<x, y>)`` summed over the leaves, as a 0-d tensor (no host synchronisation)."""
    leaves_x, treespec = pytree.tree_flatten(tree_x)
    leaves_y = treespec.flatten_up_to(tree_y)
    return tree_math.real_vdot(leaves_x, leaves_y)


def power_of_two_scale(tree: TensorTree) -> torch.Tensor:
    """A power of two close to the largest magnitude in ``tree`` (1 if that is 0 or not finite).

    Dividing by it is exact, and brings the largest magnitude into ``[1, 2)``.
    """
    magnitudes = [leaf.detach().abs().amax() for leaf in pytree.tree_leaves(tree) if leaf.numel()]
    if not magnitudes:
        return torch.ones(())
    largest = torch.stack(magnitudes).amax()
    usable = (largest > 0) & torch.isfinite(largest)
    return torch.where(usable, torch.exp2(torch.floor(torch.log2(largest))), 1.0)


def tree_scale(tree: TensorTree, factor: torch.Tensor) -> TensorTree:
    """Multiplies every leaf by a 0-d ``factor`` without changing the dtype of any leaf."""

    def scale(leaf: torch.Tensor) -> torch.Tensor:
        return leaf * factor.to(leaf.real.dtype if leaf.is_complex() else leaf.dtype)

    return pytree.tree_map(scale, tree)


def tree_axpy(alpha: torch.Tensor | float, tree_x: TensorTree, tree_y: TensorTree) -> TensorTree:
    """``alpha * x + y`` leaf by leaf, ``alpha`` being a number or a 0-d tensor."""
    return pytree.tree_map(lambda x, y: y + alpha * x, tree_x, tree_y)


def normalize_matvec(
    matvec: TensorTree | Callable[[TensorTree], TensorTree],
) -> Callable[[TensorTree], TensorTree]:
    """Turns a linear operator into a function ``x -> A x``.

    Args:
        matvec: Either a function computing ``A x``, or a tree of square matrices, one per leaf
            of ``x`` (a block-diagonal operator).

    Returns:
        The function ``x -> A x``.

    Raises:
        TypeError: If a leaf of a tree operator is not a square matrix.
    """
    if callable(matvec):
        return matvec

    matrices, treespec = pytree.tree_flatten(matvec)
    for matrix in matrices:
        if not isinstance(matrix, torch.Tensor) or matrix.ndim != 2 \
                or matrix.shape[0] != matrix.shape[1]:
            shape = tuple(matrix.shape) if isinstance(matrix, torch.Tensor) else type(matrix)
            raise TypeError(f"A linear operator must be a square matrix, got {shape}.")

    def apply_blocks(x: TensorTree) -> TensorTree:
        vectors = treespec.flatten_up_to(x)
        return pytree.tree_unflatten(treespec, list(map(torch.matmul, matrices, vectors)))

    return apply_blocks


def check_same_shapes(tree_x: TensorTree, tree_y: TensorTree, name_x: str, name_y: str) -> None:
    """Raises ``ValueError`` naming the first path where two trees differ in structure or shape."""
    paths_x, leaves_x, spec_x = pytree.tree_flatten_with_path(tree_x)
    _, leaves_y, spec_y = pytree.tree_flatten_with_path(tree_y)
    if spec_x != spec_y:
        raise ValueError(f"{name_x} and {name_y} must have the same tree structure: "
                         f"{spec_x} vs {spec_y}.")
    for path, x, y in zip(paths_x, leaves_x, leaves_y, strict=True):
        if x.shape != y.shape:
            where = "".join(f"[{key!r}]" for key in path) or "<root>"
            raise ValueError(f"{name_x} and {name_y} must have matching shapes; at {where}: "
                             f"{tuple(x.shape)} vs {tuple(y.shape)}.")


def report_failure(
    solution: TensorTree, ok: torch.Tensor, message: Callable[[], str],
) -> TensorTree:
    """Raises ``RuntimeError(message())`` unless ``ok``; under ``vmap``, poisons the result instead.

    A Python exception cannot depend on the values of a batch inside ``torch.func.vmap``, so there
    the failed members of the batch get NaN solutions, which no downstream use can mistake for a
    valid answer.
    """
    if vmap_active():
        return pytree.tree_map(lambda t: torch.where(ok, t, math.nan), solution)
    if not bool(ok):
        raise RuntimeError(message())
    return solution
