"""Scaling updates by a schedule of the step count (``optax_compat``'s ``scale_by_schedule``)."""

from __future__ import annotations

import optax_compat
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import from_optax
from torchopt_fn.typing import Schedule

__all__ = ["scale_by_schedule"]


def scale_by_schedule(step_size_fn: Schedule) -> GradientTransformation:
    """Scales updates by ``step_size_fn(count)``, ``count`` being the number of past updates.

    Args:
      step_size_fn: maps the step count (an ``int32`` 0-d tensor, starting at 0) to a factor.

    Returns:
      A :class:`GradientTransformation` whose state holds the step count.
    """
    return from_optax(optax_compat.scale_by_schedule(step_size_fn))
