"""The AdamW alias with PyTorch-style arguments."""

from __future__ import annotations

from collections.abc import Callable

from optax_compat._runtime.adam_engine import AdamHyperParams, AliasTerms
from torchopt_fn.alias.utils import (
    check_learning_rate,
    flip_sign_and_add_weight_decay,
    on_adam_engine,
    scale_by_neg_lr,
)
from torchopt_fn.combine import chain
from torchopt_fn.transform import add_decayed_weights, scale_by_accelerated_adam, scale_by_adam
from torchopt_fn.typing import GradientTransformation, OptState, Params, ScalarOrSchedule

__all__ = ["adamw"]


def adamw(lr: ScalarOrSchedule = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
          eps: float = 1e-8, weight_decay: float = 1e-2, *, eps_root: float = 0.0,
          mask: OptState | Callable[[Params], OptState] | None = None,
          moment_requires_grad: bool = False, maximize: bool = False,
          use_accelerated_op: bool = False) -> GradientTransformation:
    """Adam with decoupled weight decay, as ``torch.optim.AdamW``.

    The decay is multiplied by the learning rate, as in PyTorch.

    References:
      Loshchilov and Hutter, 2019: https://arxiv.org/abs/1711.05101

    Args:
      lr: the learning rate, a constant or a schedule of the step count.
      betas: decay rates of the first and second moments.
      eps: added to the denominator outside the square root.
      weight_decay: the decoupled weight decay rate.
      eps_root: added inside the square root.
      mask: which leaves to decay (a tree of booleans or a function of the params).
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
        flip_sign_and_add_weight_decay(weight_decay=0.0, maximize=maximize),
        direction,
        add_decayed_weights(weight_decay=weight_decay, mask=mask),
        scale_by_neg_lr(lr),
    )
    # Whole in-place steps on the Adam engine; the accelerated op's on PyTorch's fused kernel
    # where it applies.
    terms = AliasTerms(lr, weight_decay=weight_decay if mask is None else None, l2=0.0,
                       maximize=maximize, fused_kernel=use_accelerated_op)
    return on_adam_engine("adamw", tx, direction, AdamHyperParams(b1, b2, eps, eps_root), terms)
