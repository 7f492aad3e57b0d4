"""The SGD alias with PyTorch-style arguments."""

from __future__ import annotations

from torchopt_fn.alias.utils import (
    flip_sign_and_add_weight_decay,
    scale_by_neg_lr,
    tag_alias_steps,
)
from torchopt_fn.combine import chain
from torchopt_fn.transform import trace
from torchopt_fn.typing import GradientTransformation, ScalarOrSchedule

__all__ = ["sgd"]


def sgd(lr: ScalarOrSchedule, momentum: float = 0.0, dampening: float = 0.0,
        weight_decay: float = 0.0, nesterov: bool = False, *,
        moment_requires_grad: bool = False, maximize: bool = False) -> GradientTransformation:
    """Stochastic gradient descent with momentum, as ``torch.optim.SGD``.

    References:
      Sutskever et al., 2013: http://proceedings.mlr.press/v28/sutskever13.pdf

    Args:
      lr: the learning rate, a constant or a schedule of the step count.
      momentum: momentum factor (``0.0``: no momentum buffer).
      dampening: dampening of the momentum.
      weight_decay: L2 penalty added to the gradients.
      nesterov: use Nesterov momentum.
      moment_requires_grad: create the momentum buffer as an autograd leaf requiring grad.
      maximize: maximize the objective instead of minimizing it.

    Returns:
      A :class:`GradientTransformation`.
    """
    return tag_alias_steps("sgd", chain(
        flip_sign_and_add_weight_decay(weight_decay=weight_decay, maximize=maximize),
        trace(momentum=momentum, dampening=dampening, nesterov=nesterov,
              moment_requires_grad=moment_requires_grad),
        scale_by_neg_lr(lr),
    ))
