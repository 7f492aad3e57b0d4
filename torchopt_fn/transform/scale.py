"""Scaling updates by a constant (``optax_compat``'s ``scale``)."""

from __future__ import annotations

import optax_compat
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import from_optax

__all__ = ["scale"]


def scale(step_size: float) -> GradientTransformation:
    """Scales updates by a fixed ``step_size``.

    Args:
      step_size: the factor every update is multiplied by.

    Returns:
      A :class:`GradientTransformation` with an empty state.
    """
    return from_optax(optax_compat.scale(step_size))
