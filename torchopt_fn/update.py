"""Applying updates to parameters (TorchOpt's ``apply_updates`` with ``inplace``)."""

from __future__ import annotations

import torch

from optax_compat._src import tree_math
from torchopt_fn.typing import Params, Updates

__all__ = ["apply_updates"]


def _needs_graph(param: torch.Tensor, update: torch.Tensor) -> bool:
    """Whether ``param + update`` must be recorded by autograd."""
    return torch.is_grad_enabled() and (update.requires_grad or param.grad_fn is not None)


def apply_updates(params: Params, updates: Updates, *, inplace: bool = True) -> Params:
    """Adds ``updates`` to ``params``.

    With ``inplace=True`` the parameters are updated in place and returned. Where autograd must
    see the addition (grad mode on, and the update requires grad or the parameter is itself the
    output of a differentiable step), the in-place addition is recorded in the graph; TorchOpt
    adds to ``p.data`` there instead, which silently cuts the meta-gradient. An autograd leaf
    that requires grad cannot be updated in place within a graph: that case raises.

    Args:
      params: a tree of parameters.
      updates: a tree of updates with the structure of ``params``.
      inplace: update the parameter tensors themselves instead of returning new ones.

    Returns:
      The updated parameters, with the structure of ``params``.

    Raises:
      ValueError: naming the first path where ``updates`` differs from ``params``.
      RuntimeError: for an in-place update of a leaf that requires grad by an update that
        requires grad (use ``inplace=False``).
    """
    param_leaves, spec = tree_math.flatten(params)
    update_leaves = tree_math.leaves_like(updates, spec, "updates", params)
    if not inplace:
        return tree_math.unflatten(spec, tree_math.add(param_leaves, update_leaves))
    traced = [_needs_graph(p, u) for p, u in zip(param_leaves, update_leaves, strict=True)]
    untraced_params = [p for p, t in zip(param_leaves, traced, strict=True) if not t]
    if untraced_params:
        with torch.no_grad():
            torch._foreach_add_(untraced_params,
                                [u for u, t in zip(update_leaves, traced, strict=True) if not t])
    for param, update, is_traced in zip(param_leaves, update_leaves, traced, strict=True):
        if not is_traced:
            continue
        if param.is_leaf and param.requires_grad:
            raise RuntimeError(
                "apply_updates(inplace=True) cannot update a leaf tensor that requires grad with "
                "an update that is part of an autograd graph: the meta-gradient would be lost. "
                "Use apply_updates(..., inplace=False) to differentiate through the update.")
        param.add_(update)
    return params
