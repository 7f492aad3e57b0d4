"""The RMSProp alias with PyTorch-style arguments and PyTorch's epsilon placement."""

from __future__ import annotations

from torchopt_fn.alias.utils import (
    check_learning_rate,
    flip_sign_and_add_weight_decay,
    scale_by_neg_lr,
    tag_alias_steps,
)
from torchopt_fn.combine import chain
from torchopt_fn.transform import scale_by_rms, scale_by_stddev, trace
from torchopt_fn.typing import GradientTransformation, ScalarOrSchedule

__all__ = ["rmsprop"]


def rmsprop(lr: ScalarOrSchedule = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
            weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, *,
            initial_scale: float = 0.0, nesterov: bool = False,
            maximize: bool = False) -> GradientTransformation:
    """RMSProp, as ``torch.optim.RMSprop``: ``g / (sqrt(nu) + eps)`` (Optax: ``sqrt(nu + eps)``).

    References:
      Tieleman and Hinton, 2012: http://www.cs.toronto.edu/~hinton/coursera/lecture6/lec6.pdf
      Graves, 2013: https://arxiv.org/abs/1308.0850

    Args:
      lr: the learning rate, a constant or a schedule of the step count.
      alpha: decay rate of the moving average of the squared gradients.
      eps: added to the root.
      weight_decay: L2 penalty added to the gradients.
      momentum: momentum factor applied after the rescaling.
      centered: divide by the running standard deviation instead of the root mean square.
      initial_scale: the initial value of the moving average of the squares.
      nesterov: use Nesterov momentum.
      maximize: maximize the objective instead of minimizing it.

    Returns:
      A :class:`GradientTransformation`.
    """
    check_learning_rate(lr)
    scaler = scale_by_stddev if centered else scale_by_rms
    return tag_alias_steps("rmsprop", chain(
        flip_sign_and_add_weight_decay(weight_decay=weight_decay, maximize=maximize),
        scaler(alpha=alpha, eps=eps, initial_scale=initial_scale),
        trace(momentum=momentum, nesterov=nesterov),
        scale_by_neg_lr(lr),
    ))
