"""AdaDelta's rescaling (``optax_compat``'s ``scale_by_adadelta``; same numbers as PyTorch's)."""

from __future__ import annotations

import optax_compat
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import from_optax, with_moment_requires_grad

__all__ = ["scale_by_adadelta"]


def scale_by_adadelta(rho: float = 0.9, eps: float = 1e-6,
                      moment_requires_grad: bool = False) -> GradientTransformation:
    """Rescales updates by ``sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps)``.

    References:
      Zeiler, 2012: https://arxiv.org/abs/1212.5701

    Args:
      rho: decay rate of both running averages.
      eps: added inside both square roots.
      moment_requires_grad: create the moments as autograd leaves that require grad.

    Returns:
      A :class:`GradientTransformation`.
    """
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"Invalid rho value: {rho}")
    if not eps >= 0.0:
        raise ValueError(f"Invalid epsilon value: {eps}")
    tx = from_optax(optax_compat.scale_by_adadelta(rho=rho, eps=eps))
    return with_moment_requires_grad(tx, moment_requires_grad)
