"""Decoupled weight decay and masking (``optax_compat``'s ``add_decayed_weights``, ``masked``)."""

from __future__ import annotations

from collections.abc import Callable

import optax_compat
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import from_optax, to_optax
from torchopt_fn.typing import OptState, Params

__all__ = ["add_decayed_weights", "masked"]

Mask = OptState | Callable[[Params], OptState]


def masked(inner: GradientTransformation, mask: Mask | None = None) -> GradientTransformation:
    """Applies ``inner`` only to the leaves selected by ``mask``; the others pass through.

    Args:
      inner: the transformation to apply to the masked-in leaves.
      mask: a tree of booleans with the structure of the params (or a prefix of it), or a
        function returning one given the params; ``None`` applies ``inner`` everywhere.

    Returns:
      A :class:`GradientTransformation`.
    """
    if mask is None:
        return inner
    return from_optax(optax_compat.masked(to_optax(inner), mask))


def add_decayed_weights(weight_decay: float = 0.0,
                        mask: Mask | None = None) -> GradientTransformation:
    """Adds ``weight_decay * params`` to the updates (decoupled weight decay, as in AdamW).

    Args:
      weight_decay: the decay rate.
      mask: which leaves to decay, as for :func:`masked`; ``None`` decays all of them.

    Returns:
      A :class:`GradientTransformation`; its ``update`` needs ``params``.
    """
    if not weight_decay >= 0.0:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    return from_optax(optax_compat.add_decayed_weights(weight_decay, mask))
