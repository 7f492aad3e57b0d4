"""Gradient hooks and the transformation that registers them."""

from __future__ import annotations

from collections.abc import Callable

import torch

from optax_compat._runtime import tree_math
from torchopt_fn.base import EmptyState, GradientTransformation
from torchopt_fn.typing import OptState, Params, Updates

__all__ = ["zero_nan_hook", "nan_to_num_hook", "register_hook"]


def zero_nan_hook(g: torch.Tensor) -> torch.Tensor:
    """Replaces ``nan`` in a gradient by zero."""
    return g.nan_to_num(nan=0.0)


def nan_to_num_hook(nan: float = 0.0, posinf: float | None = None,
                    neginf: float | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """A hook replacing ``nan``, ``+inf`` and ``-inf`` in a gradient by the given numbers."""

    def hook(g: torch.Tensor) -> torch.Tensor:
        return g.nan_to_num(nan=nan, posinf=posinf, neginf=neginf)

    return hook


def register_hook(hook: Callable[[torch.Tensor], torch.Tensor | None]) -> GradientTransformation:
    """A transformation that registers ``hook`` on every update and passes updates through.

    The hook runs when a gradient flows back through the updates (e.g. a meta-gradient through
    a differentiable inner step), as with :meth:`torch.Tensor.register_hook`.

    Args:
      hook: called with the gradient of each update; may return a replacement.

    Returns:
      A stateless :class:`GradientTransformation`.
    """

    def init_fn(params: Params) -> OptState:
        del params
        return EmptyState()

    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        del params, inplace
        for update in tree_math.leaves(updates):
            if update.requires_grad:
                update.register_hook(hook)
        return updates, state

    return GradientTransformation(init_fn, update_fn)
