"""Applying a transformation only at some steps (mirrors ``optax/transforms/_conditionality.py``).

Where Optax uses ``lax.cond``, both branches run and the result is selected with
``torch.where`` (see :mod:`optax_compat._runtime.control_flow`), so no update reads a tensor on the
host. The numbers are Optax's: the rejected branch is computed but never used.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import control_flow, tree_math
from optax_compat._src import base, numerics


class ConditionFn(Protocol):
    """Decides from the step counter (and optionally extra args) whether to transform."""

    def __call__(self, step: torch.Tensor, **extra_args: Any) -> torch.Tensor | bool:
        """Returns a boolean (0-d tensor) telling whether the inner transformation applies.

        Args:
          step: the number of previous ``update`` calls, an int32 0-d tensor.
          **extra_args: the extra arguments of ``update``, if forwarded.
        """


def _zeros_like_tree(tree: base.Updates) -> base.Updates:
    return tree_math.tree_map(torch.zeros_like, tree)


class ConditionallyTransformState(NamedTuple):
    """The inner state and the number of previous ``update`` calls."""

    inner_state: Any
    step: torch.Tensor


def conditionally_transform(
    inner: base.GradientTransformation,
    should_transform_fn: ConditionFn,
    forward_extra_args: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Applies ``inner`` at the steps ``should_transform_fn`` selects; else passes through.

    When the condition is false, updates and inner state are left unchanged (use
    :func:`conditionally_mask` to zero the updates instead).

    Args:
      inner: the transformation to apply conditionally.
      should_transform_fn: maps the step counter (int32 0-d tensor; plus the extra args if
        ``forward_extra_args``) to a boolean 0-d tensor.
      forward_extra_args: also pass the extra arguments of ``update`` to
        ``should_transform_fn``.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.conditionally_transform(
      ...     optax.scale(-0.1), should_transform_fn=lambda count: count % 2 == 0)
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([1.0, 1.0])}
      >>> updates, state = tx.update(grads, state)
      >>> updates["w"]  # step 0: transformed
      tensor([-0.1000, -0.1000])
      >>> updates, state = tx.update(grads, state)
      >>> updates["w"]  # step 1: passed through
      tensor([1., 1.])
    """
    inner = base.with_extra_args_support(inner)

    def init_fn(params: base.Params) -> ConditionallyTransformState:
        return ConditionallyTransformState(inner_state=inner.init(params),
                                           step=bb.zero_count(params))

    @bb.elementwise_if(inner)
    def update_fn(updates: base.Updates, state: ConditionallyTransformState,
                  params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, ConditionallyTransformState]:
        condition_kwargs = extra_args if forward_extra_args else {}
        new_updates, new_inner_state = control_flow.cond(
            should_transform_fn(state.step, **condition_kwargs),
            lambda: inner.update(updates, state.inner_state, params,
                                 **extra_args),
            lambda: (updates, state.inner_state))
        return new_updates, ConditionallyTransformState(
            new_inner_state, numerics.safe_increment(state.step))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


class ConditionallyMaskState(NamedTuple):
    """The number of previous ``update`` calls and the inner state."""

    step: torch.Tensor
    inner_state: base.OptState


def conditionally_mask(
    inner: base.GradientTransformation,
    should_transform_fn: ConditionFn,
    forward_extra_args: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Applies ``inner`` at the steps ``should_transform_fn`` selects; else zeroes the updates.

    When the condition is false the inner state is left unchanged and the updates are set to
    zero (use :func:`conditionally_transform` to pass them through instead).

    Args:
      inner: the transformation to apply conditionally.
      should_transform_fn: maps the step counter (int32 0-d tensor; plus the extra args if
        ``forward_extra_args``) to a boolean 0-d tensor.
      forward_extra_args: also pass the extra arguments of ``update`` to
        ``should_transform_fn``.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.conditionally_mask(optax.scale(-0.1),
      ...                               should_transform_fn=lambda count: count % 2 == 0)
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([1.0, 1.0])}
      >>> updates, state = tx.update(grads, state)
      >>> updates["w"]  # step 0: transformed
      tensor([-0.1000, -0.1000])
      >>> updates, state = tx.update(grads, state)
      >>> updates["w"]  # step 1: zeroed
      tensor([0., 0.])
    """
    inner = base.with_extra_args_support(inner)

    def init_fn(params: base.Params) -> ConditionallyMaskState:
        return ConditionallyMaskState(step=bb.zero_count(params), inner_state=inner.init(params))

    @bb.elementwise_if(inner)
    def update_fn(updates: base.Updates, state: ConditionallyMaskState,
                  params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, ConditionallyMaskState]:
        condition_kwargs = extra_args if forward_extra_args else {}
        new_updates, new_inner_state = control_flow.cond(
            should_transform_fn(state.step, **condition_kwargs),
            lambda: inner.update(updates, state.inner_state, params,
                                 **extra_args),
            lambda: (_zeros_like_tree(updates), state.inner_state))
        return new_updates, ConditionallyMaskState(
            step=numerics.safe_increment(state.step), inner_state=new_inner_state)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


class ApplyIfFiniteState(NamedTuple):
    """State of :func:`apply_if_finite`.

    Attributes:
      notfinite_count: consecutive updates that contained an Inf or a NaN (reset to 0 by a
        finite one).
      last_finite: whether the last update was finite.
      total_notfinite: all updates that contained an Inf or a NaN since ``init``.
      inner_state: the state of the inner transformation.
    """

    notfinite_count: Any
    last_finite: Any
    total_notfinite: Any
    inner_state: Any


def all_finite(tree: base.Updates) -> torch.Tensor:
    """A boolean 0-d tensor: whether every element of every leaf of ``tree`` is finite."""
    leaves = tree_math.leaves(tree)
    if not leaves:
        return torch.tensor(True)
    return torch.stack([torch.isfinite(leaf).all() for leaf in leaves]).all()


def apply_if_finite(
    inner: base.GradientTransformation, max_consecutive_errors: int,
) -> base.GradientTransformation:
    """Skips updates that contain a NaN or an Inf, up to ``max_consecutive_errors`` in a row.

    A skipped update returns zeros and leaves the inner state unchanged. After more than
    ``max_consecutive_errors`` consecutive non-finite updates the wrapper gives up and lets
    them through.

    Args:
      inner: the transformation to protect.
      max_consecutive_errors: how many consecutive non-finite updates to ignore.

    Returns:
      A :class:`GradientTransformationExtraArgs` with an :class:`ApplyIfFiniteState`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.apply_if_finite(optax.sgd(0.1), max_consecutive_errors=2)
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"w": torch.tensor([float("inf"), 1.0])}, state, params)
      >>> updates["w"], int(state.total_notfinite)
      (tensor([0., 0.]), 1)
    """
    inner = base.with_extra_args_support(inner)

    def init_fn(params: base.Params) -> ApplyIfFiniteState:
        return ApplyIfFiniteState(
            notfinite_count=bb.zero_count(params),
            last_finite=torch.tensor(True, device=bb.device_of(params)),
            total_notfinite=bb.zero_count(params), inner_state=inner.init(params))

    @bb.elementwise_if(inner, global_reduction="checks the whole tree for non-finite values")
    def update_fn(updates: base.Updates, state: ApplyIfFiniteState,
                  params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, ApplyIfFiniteState]:
        isfinite = all_finite(updates)
        notfinite_count = torch.where(isfinite, torch.zeros_like(state.notfinite_count),
                                      numerics.safe_increment(state.notfinite_count))
        new_updates, new_inner_state = control_flow.cond(
            isfinite | (notfinite_count > max_consecutive_errors),
            lambda: inner.update(updates, state.inner_state, params,
                                 **extra_args),
            lambda: (_zeros_like_tree(updates), state.inner_state))
        return new_updates, ApplyIfFiniteState(
            notfinite_count=notfinite_count, last_finite=isfinite,
            total_notfinite=torch.where(isfinite, state.total_notfinite,
                                        numerics.safe_increment(state.total_notfinite)),
            inner_state=new_inner_state)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
