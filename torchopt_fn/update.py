"""Applying updates to parameters (TorchOpt's ``apply_updates`` with ``inplace``)."""

from __future__ import annotations

import torch

from optax_compat._runtime import tree_math
from torchopt_fn._graph_tags import extend_optimizer_step
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
    that requires grad cannot be updated in place within a graph: that case raises. New
    parameters computed from the updates of a tagged optimizer step join that step, so the
    visualizer draws the addition inside each parameter's step.

    Args:
      params: a tree of parameters.
      updates: a tree of updates with the structure of ``params``; a ``None`` in place of a
        tensor leaves that parameter unchanged.
      inplace: update the parameter tensors themselves instead of returning new ones.

    Returns:
      The updated parameters, with the structure of ``params``.

    Raises:
      ValueError: naming the first path where ``updates`` differs from ``params``.
      RuntimeError: for an in-place update of a leaf that requires grad by an update that
        requires grad (use ``inplace=False``).
    """
    param_leaves, spec = tree_math.flatten(params)
    try:
        update_leaves = spec.flatten_up_to(updates)
    except ValueError:
        raise ValueError("The structure of updates does not match the params: "
                         + tree_math.first_difference(params, updates, 'params', 'updates')
                         + ".") from None
    # As in TorchOpt, a ``None`` update leaves its parameter unchanged.
    indices = [i for i, u in enumerate(update_leaves) if u is not None]
    targets = [param_leaves[i] for i in indices]
    sources = [update_leaves[i] for i in indices]
    if not inplace:
        new_leaves = list(param_leaves)
        added = tree_math.add(targets, sources)
        if tree_math.is_recording(sources):
            extend_optimizer_step(added, sources)
        for i, new in zip(indices, added, strict=True):
            new_leaves[i] = new
        return tree_math.unflatten(spec, new_leaves)
    traced = [_needs_graph(p, u) for p, u in zip(targets, sources, strict=True)]
    untraced = [(p, u) for p, u, t in zip(targets, sources, traced, strict=True) if not t]
    if untraced:
        with torch.no_grad():
            torch._foreach_add_([p for p, _ in untraced], [u for _, u in untraced])
    for param, update, is_traced in zip(targets, sources, traced, strict=True):
        if not is_traced:
            continue
        if param.is_leaf and param.requires_grad:
            raise RuntimeError(
                "apply_updates(inplace=True) cannot update a leaf tensor that requires grad with "
                "an update that is part of an autograd graph: the meta-gradient would be lost. "
                "Use apply_updates(..., inplace=False) to differentiate through the update.")
        param.add_(update)
        extend_optimizer_step([param], [update])
    return params
