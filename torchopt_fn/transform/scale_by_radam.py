"""RAdam's rectified rescaling with PyTorch's epsilon placement.

Optax's ``scale_by_radam`` divides the bias-corrected moment by ``sqrt(v_hat) + eps``; TorchOpt
(like ``torch.optim.RAdam``) divides by ``(sqrt(v) + eps) / sqrt(1 - b2^t)``, so ``eps`` is not
scaled by the bias correction. The rectification switch is a ``torch.where`` on the step count,
with no host synchronisation.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

import optax_compat
from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import moment_leaves, with_moment_requires_grad
from torchopt_fn.typing import OptState, Params, Updates

__all__ = ["scale_by_radam"]

RECTIFICATION_THRESHOLD = 5.0


class ScaleByRAdamState(NamedTuple):
    """The moments and the number of past updates (an ``int32`` 0-d tensor)."""

    mu: Updates
    nu: Updates
    count: torch.Tensor


def _rectified_step_sizes(count: torch.Tensor, b1: float,
                          b2: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rectify, 1 / (1 - b1^t), rectified factor)`` as float64 0-d tensors."""
    t = count.to(torch.float64)
    b2_pow_t = torch.pow(b2, t)
    bias_correction1 = 1.0 - torch.pow(b1, t)
    bias_correction2 = 1.0 - b2_pow_t
    rho_inf = 2.0 / (1.0 - b2) - 1.0
    rho_t = rho_inf - 2.0 * t * b2_pow_t / bias_correction2
    rectify = rho_t > RECTIFICATION_THRESHOLD
    # Clamped so that the unselected branch stays finite (no nan leaking into gradients).
    ratio = ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf
             / ((rho_inf - 4.0) * (rho_inf - 2.0) * torch.clamp(rho_t, min=1.0)))
    rectified = torch.sqrt(torch.clamp(ratio, min=0.0) * bias_correction2)
    return rectify, 1.0 / bias_correction1, torch.where(rectify, rectified, 0.0)


def scale_by_radam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                   moment_requires_grad: bool = False) -> GradientTransformation:
    """Rescales updates by RAdam's rectified, bias-corrected moment estimates.

    References:
      Liu et al., 2019: https://arxiv.org/abs/1908.03265

    Args:
      b1: decay rate of the first moment.
      b2: decay rate of the second moment.
      eps: added to ``sqrt(v)`` (before the bias correction, as PyTorch does).
      moment_requires_grad: create the moments as autograd leaves that require grad.

    Returns:
      A :class:`GradientTransformation` with a :class:`ScaleByRAdamState`.
    """
    if not 0.0 <= b1 <= 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {b1}")
    if not 0.0 <= b2 < 1.0 or math.isclose(2.0 / (1.0 - b2) - 1.0, 4.0):
        raise ValueError(f"Invalid beta parameter at index 1: {b2}")
    if not eps >= 0.0:
        raise ValueError(f"Invalid epsilon value: {eps}")

    def init_fn(params: Params) -> OptState:
        return ScaleByRAdamState(mu=bb.zeros(params), nu=bb.zeros(params),
                                 count=bb.zero_count(params))

    @bb.elementwise
    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        del params
        grads, spec = tree_math.flatten(updates)
        mu = tree_math.leaves_like(state.mu, spec, "state.mu", updates)
        nu = tree_math.leaves_like(state.nu, spec, "state.nu", updates)
        mu = moment_leaves(grads, mu, b1, order=1, inplace=inplace)
        nu = moment_leaves(grads, nu, b2, order=2, inplace=inplace)
        count = optax_compat.safe_increment(state.count)
        rectify, inv_bias_correction1, rectified = _rectified_step_sizes(count, b1, b2)
        mu_hat = tree_math.mul(mu, inv_bias_correction1)
        adaptive = tree_math.div(tree_math.mul(mu_hat, rectified),
                                 tree_math.add(tree_math.sqrt(nu), eps))
        new_updates = tree_math.where(rectify, adaptive, mu_hat)
        return tree_math.unflatten(spec, new_updates), ScaleByRAdamState(
            mu=tree_math.unflatten(spec, mu), nu=tree_math.unflatten(spec, nu), count=count)

    return with_moment_requires_grad(GradientTransformation(init_fn, update_fn),
                                     moment_requires_grad)
