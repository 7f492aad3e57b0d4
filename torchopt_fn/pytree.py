"""Pytree utilities: optree's whole API plus arithmetic over the leaves of trees.

As in TorchOpt, this module re-exports every public name of :mod:`optree` unchanged (``None`` is
a node, not a leaf, and the global registry namespace is used), and adds ``tree_add``,
``tree_vdot_real`` and the other arithmetic helpers used by the linear solvers.

Trees whose leaves are all tensors go through the foreach-backed layer
:mod:`optax_compat._runtime.tree_math` (one kernel launch per operation for the
whole tree); other
leaves (Python numbers) and code running under a ``torch.func`` transform, where foreach kernels
have no batching rule, fall back to one operator call per leaf.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import optree
import torch
import torch.distributed.rpc as rpc
from optree import *  # noqa: F403 - the public API is optree's plus the helpers below
from optree import PyTree, PyTreeSpec, tree_flatten, tree_map, tree_unflatten

from optax_compat._runtime import tree_math
from torchopt_fn._functorch_state import transform_active
from torchopt_fn.typing import Future, Scalar, T, TensorTree

__all__ = [
    *optree.__all__,
    "tree_flatten_as_tuple",
    "tree_pos",
    "tree_neg",
    "tree_add",
    "tree_add_scalar_mul",
    "tree_sub",
    "tree_sub_scalar_mul",
    "tree_mul",
    "tree_matmul",
    "tree_scalar_mul",
    "tree_truediv",
    "tree_vdot_real",
    "tree_wait",
]


def tree_flatten_as_tuple(
    tree: PyTree[T],
    is_leaf: Callable[[T], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[tuple[T, ...], PyTreeSpec]:
    """Flattens a pytree into a tuple of leaves and its structure.

    Args:
        tree: The pytree to flatten.
        is_leaf: An optional predicate telling which nodes to treat as leaves.
        none_is_leaf: Whether ``None`` is a leaf rather than an empty node.
        namespace: The registry namespace of custom node types.

    Returns:
        ``(leaves, treespec)`` with ``leaves`` a tuple.
    """
    leaves, treespec = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    return tuple(leaves), treespec


def _foreach_leaves(*trees: Any) -> tuple[list[list[torch.Tensor]], PyTreeSpec] | None:
    """The leaves of each tree (structured like the first) if the foreach path applies."""
    if transform_active():
        return None
    first, treespec = tree_flatten(trees[0])
    leaves = [first, *(treespec.flatten_up_to(tree) for tree in trees[1:])]
    if not first or not all(isinstance(x, torch.Tensor) for xs in leaves for x in xs):
        return None
    return leaves, treespec


def _reduce_trees(
    foreach_op: Callable[[list[torch.Tensor], list[torch.Tensor]], list[torch.Tensor]],
    leaf_op: Callable[[Any, Any], Any],
    trees: Sequence[Any],
) -> Any:
    """Combines the trees leaf by leaf with a binary operation, left to right."""
    flat = _foreach_leaves(*trees)
    if flat is None:
        return tree_map(lambda *xs: functools.reduce(leaf_op, xs), *trees)
    leaves, treespec = flat
    return tree_unflatten(treespec, functools.reduce(foreach_op, leaves))


def tree_pos(tree: PyTree[T]) -> PyTree[T]:
    """Applies :func:`operator.pos` to every leaf."""
    return tree_map(operator.pos, tree)


def tree_neg(tree: PyTree[T]) -> PyTree[T]:
    """Negates every leaf."""
    flat = _foreach_leaves(tree)
    if flat is None:
        return tree_map(operator.neg, tree)
    (leaves,), treespec = flat
    return tree_unflatten(treespec, tree_math.neg(leaves))


def tree_add(*trees: PyTree[T]) -> PyTree[T]:
    """Sums trees of the same structure leaf by leaf."""
    return _reduce_trees(tree_math.add, operator.add, trees)


def tree_sub(minuend_tree: PyTree[T], subtrahend_tree: PyTree[T]) -> PyTree[T]:
    """Subtracts ``subtrahend_tree`` from ``minuend_tree`` leaf by leaf."""
    return _reduce_trees(tree_math.sub, operator.sub, (minuend_tree, subtrahend_tree))


def tree_mul(*trees: PyTree[T]) -> PyTree[T]:
    """Multiplies trees of the same structure leaf by leaf."""
    return _reduce_trees(tree_math.mul, operator.mul, trees)


def tree_truediv(dividend_tree: PyTree[T], divisor_tree: PyTree[T]) -> PyTree[T]:
    """Divides ``dividend_tree`` by ``divisor_tree`` leaf by leaf."""
    return _reduce_trees(tree_math.div, operator.truediv, (dividend_tree, divisor_tree))


def tree_matmul(*trees: PyTree[T]) -> PyTree[T]:
    """Chains matrix products of trees of the same structure leaf by leaf."""
    return tree_map(lambda *xs: functools.reduce(operator.matmul, xs), *trees)


def tree_add_scalar_mul(
    tree_x: TensorTree, tree_y: TensorTree, alpha: Scalar | None = None,
) -> TensorTree:
    """Computes ``tree_x + alpha * tree_y`` (``tree_x + tree_y`` if ``alpha`` is ``None``)."""
    return _axpy(tree_x, tree_y, 1 if alpha is None else alpha)


def tree_sub_scalar_mul(
    tree_x: TensorTree, tree_y: TensorTree, alpha: Scalar | None = None,
) -> TensorTree:
    """Computes ``tree_x - alpha * tree_y`` (``tree_x - tree_y`` if ``alpha`` is ``None``)."""
    return _axpy(tree_x, tree_y, -1 if alpha is None else -alpha)


def _axpy(tree_x: TensorTree, tree_y: TensorTree, alpha: Scalar) -> TensorTree:
    """``tree_x + alpha * tree_y`` leaf by leaf."""
    flat = _foreach_leaves(tree_x, tree_y)
    if flat is None:
        return tree_map(lambda x, y: x + alpha * y, tree_x, tree_y)
    (xs, ys), treespec = flat
    return tree_unflatten(treespec, tree_math.add_scaled(xs, alpha, ys))


def tree_scalar_mul(scalar: Scalar, multiplicand_tree: PyTree[T]) -> PyTree[T]:
    """Multiplies every leaf by ``scalar``."""
    flat = _foreach_leaves(multiplicand_tree)
    if flat is None:
        return tree_map(lambda x: scalar * x, multiplicand_tree)
    (leaves,), treespec = flat
    return tree_unflatten(treespec, tree_math.mul(leaves, scalar))


def tree_vdot_real(tree_x: TensorTree, tree_y: TensorTree) -> float:
    """Computes the real part of ``sum(conj(x) * y)`` over all leaves, as a Python float.

    This synchronises with the device once; the linear solvers use a tensor-valued equivalent.
    """
    leaves_x, treespec = tree_flatten(tree_x)
    leaves_y = treespec.flatten_up_to(tree_y)
    return float(tree_math.real_vdot(leaves_x, leaves_y))


def tree_wait(future_tree: PyTree[Future[T]]) -> PyTree[T]:
    r"""Waits for a tree of :class:`torch.futures.Future`\s and returns the tree of results."""
    futures, treespec = tree_flatten(future_tree)
    return tree_unflatten(treespec, torch.futures.wait_all(futures))


if rpc.is_available():
    from torch.distributed.rpc import RRef

    def tree_as_rref(tree: PyTree[T]) -> PyTree[RRef[T]]:
        r"""Wraps every leaf of a tree in an :class:`~torch.distributed.rpc.RRef`."""
        return tree_map(RRef, tree)

    def tree_to_here(
        rref_tree: PyTree[RRef[T]], timeout: float = rpc.api.UNSET_RPC_TIMEOUT,
    ) -> PyTree[T]:
        r"""Fetches the values of a tree of :class:`~torch.distributed.rpc.RRef`\s."""
        return tree_map(lambda x: x.to_here(timeout=timeout), rref_tree)

    def tree_local_value(rref_tree: PyTree[RRef[T]]) -> PyTree[T]:
        r"""Returns the local values of a tree of owner :class:`~torch.distributed.rpc.RRef`\s."""
        return tree_map(lambda x: x.local_value(), rref_tree)

    __all__ += ["tree_as_rref", "tree_to_here", "tree_local_value"]
