"""TorchOpt's ``exponential_decay`` signature over ``optax_compat``'s schedule."""

from __future__ import annotations

from optax_compat import schedules
from torchopt_fn.typing import Scalar, Schedule

__all__ = ["exponential_decay"]


def exponential_decay(init_value: Scalar, decay_rate: Scalar, transition_begin: int = 0,
                      transition_steps: int = 1, staircase: bool = False,
                      end_value: float | None = None) -> Schedule:
    """``init_value * decay_rate ** ((count - transition_begin) / transition_steps)``.

    Args:
      init_value: the value before the decay starts.
      decay_rate: the factor per ``transition_steps`` steps.
      transition_begin: the step at which the decay starts.
      transition_steps: the number of steps per factor ``decay_rate``.
      staircase: decay at discrete intervals (integer division of the exponent).
      end_value: a bound the value does not pass (a floor when decaying).

    Returns:
      A schedule: step count -> value.
    """
    return schedules.exponential_decay(init_value=init_value, transition_steps=transition_steps,
                                       decay_rate=decay_rate, transition_begin=transition_begin,
                                       staircase=staircase, end_value=end_value)
