"""Transformations that enforce constraints (mirrors ``optax/transforms/_constraining.py``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base

NonNegativeParamsState = base.EmptyState


def keep_params_nonnegative() -> base.GradientTransformation:
    """Modifies the updates so that the parameters stay non-negative after applying them.

    Where ``params + updates`` would be negative the update becomes ``-params`` (the parameter
    lands on zero). Put it last in a chain. Parameters are expected to be non-negative already;
    negative ones are moved to zero.

    Returns:
      A stateless :class:`GradientTransformation` that needs ``params``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.keep_params_nonnegative()
      >>> params = {"w": torch.tensor([1.0, 2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([-2.0, 1.0])}, state, params)
      >>> updates["w"]
      tensor([-1.,  1.])
    """

    def init_fn(params: base.Params) -> base.EmptyState:
        del params
        return NonNegativeParamsState()

    @bb.elementwise
    def update_fn(updates: base.Updates, state: base.EmptyState,
                  params: base.Params | None = None):
        update_leaves, spec = tm.flatten(updates)
        param_leaves = bb.params_leaves(params, spec, updates, "keep_params_nonnegative")
        new_params = tm.add(param_leaves, update_leaves)
        negated_params = tm.neg(param_leaves)
        return tm.unflatten(spec, [
            torch.where(new_param < 0, negated_param, update)
            for new_param, negated_param, update in zip(new_params, negated_params,
                                                        update_leaves, strict=True)]), state

    return base.GradientTransformation(init_fn, update_fn)


class ZeroNansState(NamedTuple):
    """Per leaf of the params, a 0-d bool: whether the last ``update`` found a NaN there."""

    found_nan: Any


def zero_nans() -> base.GradientTransformation:
    """Replaces NaNs in the updates by zeros and records, per leaf, whether it found any.

    The state is not used by the transformation; it lets the user see where NaNs were zeroed.

    Returns:
      A :class:`GradientTransformation`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.zero_nans()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([float("nan"), -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0., -1.])
    """

    def init_fn(params: base.Params) -> ZeroNansState:
        return ZeroNansState(found_nan=tm.tree_map(
            lambda p: torch.zeros((), dtype=torch.bool, device=p.device), params))

    @bb.per_leaf("keeps one NaN flag per leaf")
    def update_fn(updates: base.Updates, state: ZeroNansState,
                  params: base.Params | None = None):
        del params, state
        update_leaves, spec = tm.flatten(updates)
        is_nan = [torch.isnan(u) for u in update_leaves]
        found_nan = [nan.any() for nan in is_nan]
        cleaned = [torch.where(nan, 0.0, u) for nan, u in zip(is_nan, update_leaves, strict=True)]
        return tm.unflatten(spec, cleaned), ZeroNansState(found_nan=tm.unflatten(spec,
                                                                                  found_nan))

    return base.GradientTransformation(init_fn, update_fn)
