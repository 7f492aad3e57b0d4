"""Changing the layout of the tensors a transform sees (mirrors optax/transforms/_layouts.py)."""

from __future__ import annotations

from typing import Any

import torch

from optax_compat._runtime import tree_math
from optax_compat._src import base


def _concatenate(tree: base.PyTree) -> torch.Tensor:
    """All leaves of ``tree`` flattened and concatenated into one vector."""
    return torch.cat([leaf.reshape(-1) for leaf in tree_math.leaves(tree)])


def _split_like(tree: base.PyTree, flat: torch.Tensor) -> base.PyTree:
    """``flat`` cut back into the shapes and structure of ``tree``."""
    leaves, spec = tree_math.flatten(tree)
    pieces = torch.split(flat, [leaf.numel() for leaf in leaves])
    return tree_math.unflatten(spec, [piece.reshape(leaf.shape)
                                      for piece, leaf in zip(pieces, leaves, strict=True)])


def flatten(inner: base.GradientTransformation) -> base.GradientTransformationExtraArgs:
    """Runs ``inner`` on one vector that concatenates all the leaves of params and updates.

    Fewer, larger tensors cut the per-leaf overhead of ``inner`` at the cost of a copy.

    Args:
      inner: the transformation to run on the flattened vectors.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose state is ``inner``'s state for a vector.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.flatten(optax.adam(learning_rate=0.1))
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([-0.1000,  0.1000])
    """
    inner = base.with_extra_args_support(inner)

    def init_fn(params: base.Params) -> base.OptState:
        return inner.init(_concatenate(params))

    def update_fn(updates: base.Updates, state: base.OptState,
                  params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, base.OptState]:
        flat_params = None if params is None else _concatenate(params)
        flat_updates, state = inner.update(_concatenate(updates), state, flat_params,
                                           **extra_args)
        return _split_like(updates, flat_updates), state

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
