"""The Adam alias with PyTorch-style arguments."""

from __future__ import annotations

from optax_compat._runtime.adam_engine import AdamHyperParams, AliasTerms
from torchopt_fn.alias.utils import (
    check_learning_rate,
    flip_sign_and_add_weight_decay,
    on_adam_engine,
    scale_by_neg_lr,
)
from torchopt_fn.combine import chain
from torchopt_fn.transform import scale_by_accelerated_adam, scale_by_adam
from torchopt_fn.typing import GradientTransformation, ScalarOrSchedule

__all__ = ["adam"]


def adam(lr: ScalarOrSchedule = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
         eps: float = 1e-8, weight_decay: float = 0.0, *, eps_root: float = 0.0,
         moment_requires_grad: bool = False, maximize: bool = False,
         use_accelerated_op: bool = False) -> GradientTransformation:
    """Adam, as ``torch.optim.Adam`` (weight decay is an L2 term added to the gradients).

    References:
      Kingma and Ba, 2014: https://arxiv.org/abs/1412.6980

    Args:
      lr: the learning rate, a constant or a schedule of the step count.
      betas: decay rates of the first and second moments.
      eps: added to the denominator outside the square root.
      weight_decay: L2 penalty added to the gradients.
      eps_root: added inside the square root (keeps meta-gradients through Adam finite).
      moment_requires_grad: create the moments as autograd leaves requiring grad.
      maximize: maximize the objective instead of minimizing it.
      use_accelerated_op: use :func:`torchopt_fn.transform.scale_by_accelerated_adam`.

    Returns:
      A :class:`GradientTransformation`.
    """
    check_learning_rate(lr)
    scaler = scale_by_accelerated_adam if use_accelerated_op else scale_by_adam
    b1, b2 = betas
    direction = scaler(b1=b1, b2=b2, eps=eps, eps_root=eps_root,
                       moment_requires_grad=moment_requires_grad)
    tx = chain(
        flip_sign_and_add_weight_decay(weight_decay=weight_decay, maximize=maximize),
        direction,
        scale_by_neg_lr(lr),
    )
    # Whole in-place steps on the Adam engine; the accelerated op's on PyTorch's fused kernel
    # where it applies.
    terms = AliasTerms(lr, weight_decay=0.0, l2=weight_decay, maximize=maximize,
                       fused_kernel=use_accelerated_op)
    return on_adam_engine("adam", tx, direction, AdamHyperParams(b1, b2, eps, eps_root), terms)
