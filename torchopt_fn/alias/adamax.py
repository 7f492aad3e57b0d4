"""The AdaMax alias with PyTorch-style arguments."""

from __future__ import annotations

from torchopt_fn.alias.utils import (
    check_learning_rate,
    flip_sign_and_add_weight_decay,
    scale_by_neg_lr,
    tag_alias_steps,
)
from torchopt_fn.combine import chain
from torchopt_fn.transform import scale_by_adamax
from torchopt_fn.typing import GradientTransformation, ScalarOrSchedule

__all__ = ["adamax"]


def adamax(lr: ScalarOrSchedule = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
           eps: float = 1e-6, weight_decay: float = 0.0, *,
           moment_requires_grad: bool = False) -> GradientTransformation:
    """AdaMax (Adam with the infinity norm), as ``torch.optim.Adamax``.

    References:
      Kingma and Ba, 2014: https://arxiv.org/abs/1412.6980

    Args:
      lr: the learning rate, a constant or a schedule of the step count.
      betas: decay rates of the first moment and of the infinity norm.
      eps: added to ``|g|`` before taking the maximum.
      weight_decay: L2 penalty added to the gradients.
      moment_requires_grad: create the moments as autograd leaves requiring grad.

    Returns:
      A :class:`GradientTransformation`.
    """
    check_learning_rate(lr)
    b1, b2 = betas
    return tag_alias_steps("adamax", chain(
        flip_sign_and_add_weight_decay(weight_decay=weight_decay, maximize=False),
        scale_by_adamax(b1=b1, b2=b2, eps=eps, moment_requires_grad=moment_requires_grad),
        scale_by_neg_lr(lr),
    ))
