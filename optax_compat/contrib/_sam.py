"""Sharpness-Aware Minimization (mirrors ``optax/contrib/_sam.py``).

SAM alternates adversarial steps, taken by an inner optimizer (typically normalized SGD with
step ``rho``), with an outer step that starts again from the params before the adversarial
steps but uses the gradient found at their end::

    opt = optax.sgd(learning_rate)
    adv_opt = optax.chain(normalize(), optax.sgd(rho))
    sam_opt = sam(opt, adv_opt, sync_period=2)

References:
  Foret et al., `Sharpness-Aware Minimization for Efficiently Improving Generalization
  <https://arxiv.org/abs/2010.01412>`_, 2021.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, update

NormalizeState = base.EmptyState


def normalize() -> base.GradientTransformation:
    """Divides the updates by their global L2 norm.

    Returns:
      A stateless :class:`~optax_compat.GradientTransformation`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.normalize()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.4472, -0.8944])
    """

    def update_fn(updates: base.Updates, state: NormalizeState,
                  params: Optional[base.Params] = None) -> tuple[base.Updates, NormalizeState]:
        del params
        gs, spec = tm.float_leaves(updates)
        norm = torch.sqrt(tm.sum_of_squares(gs))
        return tm.unflatten(spec, tm.div(gs, tm.scalar_like(norm, gs))), state

    return base.GradientTransformation(base.init_empty_state, update_fn)


class SAMState(NamedTuple):
    """State of :func:`sam`.

    Attributes:
      steps_since_sync: adversarial steps taken since the last outer update (0-d ``int32``).
      opt_state: the state of the outer optimizer.
      adv_state: the state of the adversarial optimizer.
      cache: the params at the last outer update (``None`` in opaque mode).
    """

    steps_since_sync: torch.Tensor
    opt_state: base.OptState
    adv_state: base.OptState
    cache: Optional[base.Params]


def _pick_one(condition: torch.Tensor, if_true: Any, if_false: Any) -> Any:
    """``condition * if_true + (1 - condition) * if_false`` leaf by leaf, as Optax blends.

    Blending by arithmetic rather than ``torch.where`` keeps Optax's numbers exactly, including
    a non-finite value on the side not taken turning the result into NaN.
    """
    keep = torch.logical_not(condition)

    def blend(true_leaf: Any, false_leaf: Any) -> Any:
        if not isinstance(true_leaf, torch.Tensor):
            if true_leaf is false_leaf or true_leaf == false_leaf:
                return false_leaf
            raise TypeError(f"Cannot blend the non-tensor state leaves {true_leaf!r} and "
                            f"{false_leaf!r}.")
        return condition * true_leaf + keep * false_leaf

    return tm.tree_map(blend, if_true, if_false)


def _negated(tree: base.Updates) -> base.Updates:
    leaves, spec = tm.flatten(tree)
    return tm.unflatten(spec, tm.neg(leaves))


def sam(
    optimizer: base.GradientTransformation,
    adv_optimizer: base.GradientTransformation,
    sync_period: int = 2,
    reset_state: bool = True,
    opaque_mode: bool = False,
    batch_axis_name: Optional[str] = None,
) -> base.GradientTransformationExtraArgs:
    """Sharpness-Aware Minimization: adversarial inner steps, then an outer step.

    In the default (transparent) mode each call to ``update`` takes one step: ``sync_period -
    1`` adversarial steps with ``adv_optimizer`` (whose updates the caller applies to the
    params, so gradients are then taken at the adversarial point), then one step of
    ``optimizer`` from the params cached before the adversarial steps. In opaque mode one call
    runs the whole cycle, calling ``grad_fn(params, i)`` for the gradient at the ``i``-th
    adversarial point, so that the rest of the system (e.g. batch-norm statistics) only ever
    sees outer steps.

    Args:
      optimizer: the outer optimizer.
      adv_optimizer: the adversarial optimizer (typically ``chain(normalize(), sgd(rho))``).
      sync_period: steps per cycle: ``sync_period - 1`` adversarial ones and one outer step.
      reset_state: re-initialise the adversarial optimizer's state after each cycle.
      opaque_mode: run each whole cycle inside one ``update``; ``update`` then needs the
        keyword argument ``grad_fn``.
      batch_axis_name: in Optax, a ``jax.pmap`` axis over which adversarial gradients are
        averaged in opaque mode. PyTorch has no such axis: average inside ``grad_fn`` instead
        (e.g. with ``torch.distributed.all_reduce``); giving one with ``opaque_mode`` raises.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a :class:`SAMState`;
      ``update(updates, state, params, *, grad_fn=None)``. Other extra arguments (e.g. the
      ``inplace`` a chain forwards) are ignored: the inner optimizers always run pure, as the
      blend of old and new states needs the old ones intact.

    Raises:
      ValueError: if ``sync_period`` is below 1, or ``batch_axis_name`` is given in opaque
        mode.

    References:
      Foret et al., `Sharpness-Aware Minimization for Efficiently Improving Generalization
      <https://arxiv.org/abs/2010.01412>`_, 2021.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.sam(optax.sgd(0.1), optax.contrib.normalize(), sync_period=2)
      >>> state = opt.init(params)
      >>> for _ in range(2):  # one adversarial step, then one outer step
      ...     grads = {"w": 2 * params["w"]}
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.8894, -1.7789])
    """
    if sync_period < 1:
        raise ValueError("Synchronization period must be >= 1.")
    if opaque_mode and batch_axis_name is not None:
        raise ValueError(
            "batch_axis_name names a jax.pmap axis, which PyTorch does not have: average the "
            "adversarial gradients inside grad_fn (e.g. with torch.distributed.all_reduce).")

    def init_fn(params: base.Params) -> SAMState:
        return SAMState(
            steps_since_sync=bb.zero_count(params),
            opt_state=optimizer.init(params), adv_state=adv_optimizer.init(params),
            # A distinct copy: the cache must not alias params that may be updated in place.
            cache=None if opaque_mode else tm.tree_map(torch.clone, params))

    def transparent_update_fn(
        updates: base.Updates, state: SAMState, params: Optional[base.Params], *,
        grad_fn: Optional[Callable[[base.Params, int], base.Updates]] = None,
        **extra_args: Any,
    ) -> tuple[base.Updates, SAMState]:
        del grad_fn, extra_args
        if params is None:
            raise ValueError(bb.NO_PARAMS_MSG + " (sam needs them.)")
        first_step = state.steps_since_sync == 0
        last_step = state.steps_since_sync == sync_period - 1

        adv_updates, adv_state = adv_optimizer.update(updates, state.adv_state, params)
        adv_updates = _negated(adv_updates)

        opt_updates, opt_state = optimizer.update(updates, state.opt_state, state.cache)
        # The outer step goes from the cached params, where the cycle started.
        cached, spec = tm.flatten(state.cache)
        current = tm.leaves_like(params, spec, "params", reference=state.cache)
        steps = tm.leaves_like(opt_updates, spec, "the outer optimizer's updates",
                               reference=state.cache)
        opt_updates = tm.unflatten(spec, tm.add(tm.sub(cached, current), steps))

        cache = _pick_one(first_step, params, state.cache)
        new_updates = _pick_one(last_step, opt_updates, adv_updates)
        if reset_state:
            adv_state = _pick_one(last_step, adv_optimizer.init(params), adv_state)
        else:
            adv_state = _pick_one(last_step, state.adv_state, adv_state)
        opt_state = _pick_one(last_step, opt_state, state.opt_state)
        steps_since_sync = torch.remainder(state.steps_since_sync + 1, sync_period)
        return new_updates, SAMState(steps_since_sync=steps_since_sync, opt_state=opt_state,
                                     adv_state=adv_state, cache=cache)

    def opaque_update_fn(
        updates: base.Updates, state: SAMState, params: Optional[base.Params], *,
        grad_fn: Optional[Callable[[base.Params, int], base.Updates]] = None,
        **extra_args: Any,
    ) -> tuple[base.Updates, SAMState]:
        del extra_args
        if grad_fn is None:
            raise ValueError("grad_fn must be provided when opaque_mode=True.")
        if params is None:
            raise ValueError(bb.NO_PARAMS_MSG + " (sam needs them.)")
        adv_params, adv_updates, adv_state = params, updates, state.adv_state
        for step in range(sync_period - 1):
            adv_updates, adv_state = adv_optimizer.update(adv_updates, adv_state, adv_params)
            adv_params = update.apply_updates(adv_params, _negated(adv_updates))
            adv_updates = grad_fn(adv_params, step)
        if reset_state:
            adv_state = adv_optimizer.init(params)
        new_updates, opt_state = optimizer.update(adv_updates, state.opt_state, params)
        return new_updates, SAMState(
            steps_since_sync=torch.zeros_like(state.steps_since_sync), opt_state=opt_state,
            adv_state=adv_state, cache=None)

    update_fn = opaque_update_fn if opaque_mode else transparent_update_fn
    return base.GradientTransformationExtraArgs(init_fn, update_fn)
