"""Replacing non-finite updates by numbers."""

from __future__ import annotations

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from torchopt_fn.base import EmptyState, GradientTransformation
from torchopt_fn.typing import OptState, Params, Updates

__all__ = ["nan_to_num"]


def nan_to_num(nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> GradientTransformation:
    """Replaces ``nan``, ``+inf`` and ``-inf`` in the updates by the given numbers.

    Args:
      nan: the value replacing ``nan``.
      posinf: the value replacing ``+inf`` (default: the largest finite value of the dtype).
      neginf: the value replacing ``-inf`` (default: the lowest finite value of the dtype).

    Returns:
      A stateless :class:`GradientTransformation`.
    """

    def init_fn(params: Params) -> OptState:
        del params
        return EmptyState()

    @bb.elementwise
    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        del params
        replace = torch.Tensor.nan_to_num_ if inplace else torch.Tensor.nan_to_num
        return tree_math.tree_map(
            lambda g: replace(g, nan=nan, posinf=posinf, neginf=neginf), updates), state

    return GradientTransformation(init_fn, update_fn)
