"""The AdaGrad alias with PyTorch-style arguments."""

from __future__ import annotations

import torch

from torchopt_fn.alias.utils import (
    check_learning_rate,
    flip_sign_and_add_weight_decay,
    scale_by_neg_lr,
    tag_alias_steps,
)
from torchopt_fn.combine import chain
from torchopt_fn.transform import scale_by_rss, scale_by_schedule
from torchopt_fn.typing import GradientTransformation, Numeric, ScalarOrSchedule, Schedule

__all__ = ["adagrad"]


def _adagrad_lr_schedule(decay_rate: float) -> Schedule:
    """``1 / (1 + decay_rate * count)``: ``torch.optim.Adagrad``'s learning-rate decay."""

    def schedule(count: Numeric) -> Numeric:
        # float64, as optax_compat's schedules: an int32 count would give a float32 factor.
        count = torch.as_tensor(count, dtype=torch.float64)
        return 1.0 / (1.0 + decay_rate * count)

    return schedule


def adagrad(lr: ScalarOrSchedule = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
            initial_accumulator_value: float = 0.0, eps: float = 1e-10, *,
            maximize: bool = False) -> GradientTransformation:
    """AdaGrad, as ``torch.optim.Adagrad``.

    References:
      Duchi et al., 2011: https://jmlr.org/papers/v12/duchi11a.html

    Args:
      lr: the learning rate, a constant or a schedule of the step count.
      lr_decay: the learning rate is divided by ``1 + lr_decay * count``.
      weight_decay: L2 penalty added to the gradients.
      initial_accumulator_value: the initial sum of squared gradients.
      eps: added to the root of the sum.
      maximize: maximize the objective instead of minimizing it.

    Returns:
      A :class:`GradientTransformation`.
    """
    check_learning_rate(lr)
    if not lr_decay >= 0.0:
        raise ValueError(f"Invalid lr_decay value: {lr_decay}")
    return tag_alias_steps("adagrad", chain(
        flip_sign_and_add_weight_decay(weight_decay=weight_decay, maximize=maximize),
        scale_by_rss(initial_accumulator_value=initial_accumulator_value, eps=eps),
        scale_by_schedule(_adagrad_lr_schedule(lr_decay)),
        scale_by_neg_lr(lr),
    ))
