"""Clipping updates by their global norm, as ``torch.nn.utils.clip_grad_norm_``."""

from __future__ import annotations

import math

import torch

from optax_compat._runtime import tree_math
from torchopt_fn.base import EmptyState, GradientTransformation
from torchopt_fn.typing import OptState, Params, Updates

__all__ = ["clip_grad_norm"]

ClipState = EmptyState


def _total_norm(leaves: list[torch.Tensor], norm_type: float) -> torch.Tensor:
    """The ``norm_type``-norm of all elements of all leaves, without a host synchronisation."""
    norms = torch._foreach_norm(leaves, norm_type)
    stacked = torch.stack([n.to(leaves[0].device) for n in norms])
    return stacked.max() if math.isinf(norm_type) else torch.linalg.vector_norm(stacked, norm_type)


def clip_grad_norm(max_norm: float, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False) -> GradientTransformation:
    """Scales updates down so that their total ``norm_type``-norm is at most ``max_norm``.

    The factor is ``min(1, max_norm / (norm + 1e-6))``, as in PyTorch; the norm is not
    differentiated through (it is computed under ``torch.no_grad``).

    Args:
      max_norm: the largest allowed norm.
      norm_type: the order of the norm (``float('inf')`` for the largest absolute value).
      error_if_nonfinite: raise if the total norm is ``nan`` or infinite (this check reads
        the norm on the host).

    Returns:
      A stateless :class:`GradientTransformation`.
    """

    def init_fn(params: Params) -> OptState:
        del params
        return ClipState()

    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        del params
        leaves, spec = tree_math.flatten(updates)
        if not leaves:
            return updates, state
        with torch.no_grad():
            total_norm = _total_norm(leaves, norm_type)
        if error_if_nonfinite and not bool(torch.isfinite(total_norm)):
            raise RuntimeError(
                f"The total norm of order {norm_type} for gradients from `parameters` is "
                "non-finite, so it cannot be clipped. To disable this error and scale the "
                "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
        factor = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
        if inplace:
            torch._foreach_mul_(leaves, factor)
            return updates, state
        return tree_math.unflatten(spec, tree_math.mul(leaves, factor)), state

    return GradientTransformation(init_fn, update_fn)
