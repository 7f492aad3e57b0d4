"""The AdaDelta alias with PyTorch-style arguments."""

from __future__ import annotations

from torchopt_fn.alias.utils import (
    check_learning_rate,
    flip_sign_and_add_weight_decay,
    scale_by_neg_lr,
    tag_alias_steps,
)
from torchopt_fn.combine import chain
from torchopt_fn.transform import scale_by_adadelta
from torchopt_fn.typing import GradientTransformation, ScalarOrSchedule

__all__ = ["adadelta"]


def adadelta(lr: ScalarOrSchedule = 1e-3, rho: float = 0.9, eps: float = 1e-6,
             weight_decay: float = 0.0, *,
             moment_requires_grad: bool = False) -> GradientTransformation:
    """AdaDelta, as ``torch.optim.Adadelta`` (TorchOpt's default ``lr`` is ``1e-3``).

    References:
      Zeiler, 2012: https://arxiv.org/abs/1212.5701

    Args:
      lr: the learning rate, a constant or a schedule of the step count.
      rho: decay rate of the running averages.
      eps: added inside the square roots.
      weight_decay: L2 penalty added to the gradients.
      moment_requires_grad: create the moments as autograd leaves requiring grad.

    Returns:
      A :class:`GradientTransformation`.
    """
    check_learning_rate(lr)
    return tag_alias_steps("adadelta", chain(
        flip_sign_and_add_weight_decay(weight_decay=weight_decay, maximize=False),
        scale_by_adadelta(rho=rho, eps=eps, moment_requires_grad=moment_requires_grad),
        scale_by_neg_lr(lr),
    ))
