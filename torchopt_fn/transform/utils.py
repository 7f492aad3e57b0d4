"""Adapters between TorchOpt's calling convention and :mod:`optax_compat`'s.

``optax_compat`` transformations are called ``update(updates, state, params, **extra_args)``;
its hot transformations accept the extra argument ``inplace`` (reuse state buffers, may write
into the incoming updates). TorchOpt's are called ``update(updates, state, *, params=None,
inplace=True)``. Every TorchOpt transformation here is an ``optax_compat`` one seen through
:func:`from_optax` (defined with the types in :mod:`torchopt_fn.base`, re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import optree
import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from torchopt_fn.base import GradientTransformation, chain_optax_compat, from_optax, to_optax
from torchopt_fn.typing import OptState, Params, Updates

__all__ = [
    "from_optax",
    "to_optax",
    "chain_optax_compat",
    "with_moment_requires_grad",
    "moment_leaves",
    "divide_updates",
    "tree_map_flat",
    "tree_map_flat_",
    "inc_count",
    "update_moment",
]

INT64_MAX = torch.iinfo(torch.int64).max


def with_moment_requires_grad(tx: GradientTransformation,
                              moment_requires_grad: bool) -> GradientTransformation:
    """Makes the floating-point state buffers created by ``tx.init`` require grad.

    TorchOpt's ``moment_requires_grad=True`` creates moments that are leaves of the autograd
    graph, so that a meta-gradient can also be taken with respect to the initial optimizer state.

    Args:
      tx: the transformation whose ``init`` is wrapped.
      moment_requires_grad: whether to wrap at all.

    Returns:
      ``tx`` itself when ``moment_requires_grad`` is false, else ``tx`` with a wrapped ``init``.
    """
    if not moment_requires_grad:
        return tx

    def init_fn(params: Params) -> OptState:
        state = tx.init(params)
        for leaf in tree_math.leaves(state):
            if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.is_leaf:
                leaf.requires_grad_(True)
        return state

    return GradientTransformation(init_fn, tx.update)


def moment_leaves(updates: list[torch.Tensor], moments: list[torch.Tensor], decay: float, *,
                  order: int, inplace: bool) -> list[torch.Tensor]:
    """The moving average ``decay * moment + (1 - decay) * update ** order`` of leaf lists.

    Args:
      updates: the leaves of the incoming updates.
      moments: the leaves of the moment buffer, structured like ``updates``.
      decay: the decay rate; ``1.0`` accumulates ``update ** order`` without decay (AdaGrad).
      order: 1 (first moment) or 2 (second raw moment).
      inplace: write into ``moments`` (they are returned) instead of allocating new leaves.

    Returns:
      The new moment leaves.
    """
    if not moments:
        return list(moments)
    if isinstance(decay, torch.Tensor) or decay != 1.0:  # a tensor: never AdaGrad's sum
        return bb.moving_average(moments, updates, decay, order=order, inplace=inplace,
                                 convention="torch")
    # A running sum: the pure path runs the in-place kernels on a fresh copy (the same bits).
    target = moments if inplace else tree_math.clone(moments)
    if order == 1:
        return tree_math.add_(target, updates)
    return tree_math.addcmul_(target, updates, updates, 1.0)


def divide_updates(updates: list[torch.Tensor], denominators: list[torch.Tensor], *,
                   inplace: bool) -> list[torch.Tensor]:
    """``update / denominator`` per leaf, written into ``updates`` when ``inplace``."""
    if inplace and updates:
        torch._foreach_div_(updates, denominators)
        return updates
    return tree_math.div(updates, denominators)


def tree_map_flat(func: Callable[..., Any], flat_arg: Sequence[Any], *flat_args: Any,
                  none_is_leaf: bool = False) -> Sequence[Any]:
    """Maps ``func`` over the elements of flat sequences, keeping ``flat_arg``'s type.

    Unless ``none_is_leaf``, a ``None`` in ``flat_arg`` maps to ``None``.
    """
    def apply(x: Any, *xs: Any) -> Any:
        return func(x, *xs) if none_is_leaf or x is not None else None

    return type(flat_arg)(map(apply, flat_arg, *flat_args))


def tree_map_flat_(func: Callable[..., Any], flat_arg: Sequence[Any], *flat_args: Any,
                   none_is_leaf: bool = False) -> Sequence[Any]:
    """Calls ``func`` (for its in-place effect) on the elements; returns ``flat_arg``."""
    tree_map_flat(func, flat_arg, *flat_args, none_is_leaf=none_is_leaf)
    return flat_arg


def inc_count(updates: Updates, count: Any) -> Any:
    """A tree of counters incremented by one where ``updates`` has a leaf (saturating).

    TorchOpt's per-leaf step counters; the transformations here keep one ``int32`` counter.
    """
    def increment(c: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        return c if g is None else c + (c != INT64_MAX).to(c.dtype)

    return optree.tree_map(increment, count, updates, none_is_leaf=True)


def update_moment(updates: Updates, moments: Any, decay: float, *, order: int,
                  inplace: bool = True) -> Any:
    """The moving average ``decay * moment + (1 - decay) * update ** order`` of two trees.

    Args:
      updates: the incoming updates.
      moments: the moment buffers, structured like ``updates``.
      decay: the decay rate (``1.0``: a plain running sum of ``update ** order``).
      order: 1 or 2.
      inplace: write into ``moments``.

    Returns:
      The new moments, structured like ``updates``.
    """
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order}")
    leaves, spec = tree_math.flatten(updates)
    moment = tree_math.leaves_like(moments, spec, "moments", updates)
    return tree_math.unflatten(spec, moment_leaves(leaves, moment, decay, order=order,
                                                   inplace=inplace))
