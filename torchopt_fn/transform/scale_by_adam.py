"""Adam's rescaling: ``optax_compat``'s ``scale_by_adam`` plus ``moment_requires_grad``.

TorchOpt's Adam numerics are Optax's: ``m_hat / (sqrt(v_hat + eps_root) + eps)``.
"""

from __future__ import annotations

import optax_compat
from optax_compat._runtime import adam_engine
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import from_optax, with_moment_requires_grad

__all__ = ["scale_by_adam", "scale_by_accelerated_adam"]


def _check_adam_arguments(b1: float, b2: float, eps: float) -> None:
    if not eps >= 0.0:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= b1 < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {b1}")
    if not 0.0 <= b2 < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {b2}")


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0,
                  moment_requires_grad: bool = False) -> GradientTransformation:
    """Rescales updates by Adam's bias-corrected moment estimates.

    References:
      Kingma and Ba, 2014: https://arxiv.org/abs/1412.6980

    Args:
      b1: decay rate of the first moment.
      b2: decay rate of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root (keeps meta-gradients
        through Adam finite).
      moment_requires_grad: create the moments as autograd leaves that require grad.

    Returns:
      A :class:`GradientTransformation` with ``optax_compat``'s ``ScaleByAdamState``.
    """
    return _on_engine(adam_engine.AdamHyperParams(b1, b2, eps, eps_root),
                      moment_requires_grad)


def _on_engine(hp: adam_engine.AdamHyperParams,
               moment_requires_grad: bool) -> GradientTransformation:
    _check_adam_arguments(hp.b1, hp.b2, hp.eps)
    direction = adam_engine.scale_by_adam(hp, optax_compat.ScaleByAdamState)
    return with_moment_requires_grad(from_optax(direction), moment_requires_grad)


def scale_by_accelerated_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                              eps_root: float = 0.0,
                              moment_requires_grad: bool = False) -> GradientTransformation:
    """Adam's rescaling for ``use_accelerated_op=True`` (see :mod:`torchopt_fn.accelerated_op`).

    The numbers of :func:`scale_by_adam`, on the same Adam engine, with the backward of
    TorchOpt's accelerated op: the update and its gradient are 0 where the new first moment is
    0, so meta-gradients stay finite at ``eps_root=0`` on units whose gradient is always 0
    (where ``d sqrt(nu) / d nu`` is infinite). The whole in-place step of
    :class:`torchopt_fn.Adam`/:class:`torchopt_fn.AdamW` runs PyTorch's fused kernel.
    """
    return _on_engine(adam_engine.AdamHyperParams(b1, b2, eps, eps_root,
                                                  zero_where_mu_zero=True),
                      moment_requires_grad)
