"""AdaMax's rescaling (``optax_compat``'s ``scale_by_adamax``; same numbers as PyTorch's)."""

from __future__ import annotations

import optax_compat
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import from_optax, with_moment_requires_grad

__all__ = ["scale_by_adamax"]


def scale_by_adamax(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                    moment_requires_grad: bool = False) -> GradientTransformation:
    """Rescales updates by the bias-corrected first moment over the infinity norm.

    References:
      Kingma and Ba, 2014: https://arxiv.org/abs/1412.6980

    Args:
      b1: decay rate of the first moment.
      b2: decay rate of the infinity norm.
      eps: added to ``|update|`` before taking the maximum.
      moment_requires_grad: create the moments as autograd leaves that require grad.

    Returns:
      A :class:`GradientTransformation`.
    """
    if not 0.0 <= b1 <= 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {b1}")
    if not 0.0 <= b2 <= 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {b2}")
    if not eps >= 0.0:
        raise ValueError(f"Invalid epsilon value: {eps}")
    tx = from_optax(optax_compat.scale_by_adamax(b1=b1, b2=b2, eps=eps))
    return with_moment_requires_grad(tx, moment_requires_grad)
