"""Transformations that add a term to the updates (mirrors ``optax/transforms/_adding.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import counter_random
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics, utils
from optax_compat.transforms import _masking
from optax_compat.tree_utils import _tree_math


class WeightDecaySchedule(NamedTuple):
    """Counts the steps of a scheduled weight decay."""

    count: torch.Tensor  # 0-d int32


def add_decayed_weights(
    weight_decay: base.ScalarOrSchedule = 0.0,
    mask: Any | Callable[[base.Params], Any] | None = None,
) -> base.GradientTransformationExtraArgs:
    """Adds the parameters scaled by ``weight_decay`` to the updates (decoupled weight decay).

    Args:
      weight_decay: the decay rate: a number, a 0-d tensor or a schedule of the step count.
      mask: a tree of booleans with the structure of the params (or a prefix of it), or a
        function returning one given the params; ``True`` where to decay. Typically used to
        leave biases and normalisation scales undecayed.

    Returns:
      A :class:`GradientTransformationExtraArgs`. Its ``update`` also takes a keyword-only
      ``inplace=False``: when true the result is written into the incoming ``updates``
      tensors (same numbers as the pure path).

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.add_decayed_weights(weight_decay=0.1)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.6000, -1.2000])
    """
    bb.check_hyperparameter("weight_decay", weight_decay)
    is_schedule = callable(weight_decay)

    def init_fn(params: base.Params) -> WeightDecaySchedule | base.EmptyState:
        if is_schedule:
            return WeightDecaySchedule(count=bb.zero_count(params))
        return base.EmptyState()

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates: base.Updates, state: Any, params: base.Params | None = None,
                  *, inplace: bool = False, **extra_args: Any):
        del extra_args
        if params is None:
            raise ValueError(f"add_decayed_weights: {bb.NO_PARAMS_MSG}")
        new_state = (WeightDecaySchedule(numerics.safe_increment(state.count)) if is_schedule
                     else state)
        if bb.is_zero(weight_decay):
            return updates, new_state
        rate = weight_decay(state.count) if is_schedule else weight_decay
        grads, spec = tm.flatten(updates)
        param_leaves = tm.leaves_like(params, spec, "params", reference=updates)
        if inplace and tm.same_dtypes(grads, param_leaves):
            # Gradients outside any graph take the parameters' values only: recording the
            # addition would also fail on gradients that are views made by autograd.
            with contextlib.nullcontext() if tm.is_recording(grads) else torch.no_grad():
                tm.add_scaled_(grads, rate, param_leaves)
            return updates, new_state
        return tm.unflatten(spec, tm.add_scaled(grads, rate, param_leaves)), new_state

    transformation = base.GradientTransformationExtraArgs(init_fn, update_fn)
    if mask is not None:
        return _masking.masked(transformation, mask)
    return transformation


class AddNoiseState(NamedTuple):
    """State for adding gradient noise: a step count (for annealing) and a random key."""

    count: torch.Tensor  # 0-d int32
    rng_key: torch.Tensor  # 0-d int64 seed of the whole stream


def add_noise(
    eta: float | torch.Tensor,
    gamma: float | torch.Tensor,
    key: utils.KeyLike | None = None,
    *,
    seed: int | None = None,
) -> base.GradientTransformationExtraArgs:
    """Adds annealed Gaussian noise of variance ``eta / (1 + t) ** gamma`` to the updates.

    Args:
      eta: base variance of the noise.
      gamma: decay exponent of the variance.
      key: an int seed or a ``torch.Generator`` (drawn from once, here) for the noise.
      seed: deprecated alias of ``key``.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose state carries the key and the step
      count (its ``update`` accepts ``inplace``: the noise of a run of leaves at a time). The
      noise of a step is a pure function of both (counter-based, see
      :mod:`optax_compat._runtime.counter_random`): the stream is reproducible, nothing is read on
      the host, and ``update`` compiles without graph breaks and runs on ``meta`` tensors.
      Optax splits its key at every step instead; the noise agrees with Optax's in
      distribution, not in values.

    Raises:
      ValueError: if both ``key`` and ``seed`` are given.

    References:
      Neelakantan et al, `Adding Gradient Noise Improves Learning for Very Deep Networks
      <https://arxiv.org/abs/1511.06807>`_, 2015

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.add_noise(eta=0.01, gamma=0.55, key=0)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"].shape
      torch.Size([2])
    """
    initial_key = utils.initial_key(key, seed, "add_noise")

    def init_fn(params: base.Params) -> AddNoiseState:
        count = bb.zero_count(params)
        return AddNoiseState(count=count, rng_key=initial_key.to(count.device, copy=True))

    @bb.supports_inplace
    def update_fn(updates: base.Updates, state: AddNoiseState,
                  params: base.Params | None = None, *, inplace: bool = False,
                  **extra_args: Any):
        del params, extra_args
        count_inc = numerics.safe_increment(state.count)
        dtype = tm.widest_real_dtype(tm.leaves(updates))
        standard_deviation = torch.sqrt(eta / count_inc.to(dtype) ** gamma)
        leaves, spec = tm.flatten(updates)
        new_state = AddNoiseState(count=count_inc, rng_key=state.rng_key)
        runs = counter_random.normal_chunks(state.rng_key, state.count, leaves)
        if inplace and not tm.is_recording(leaves):
            # One run of leaves at a time (the pure path's runs): the temporaries span a block
            # or the largest leaf, not the parameters.
            for run, noise in runs:
                tm.add_(leaves[run], tm.mul_(noise, standard_deviation))
            return updates, new_state
        noise = tm.unflatten(spec, [leaf for _, noise in runs for leaf in noise])
        return _tree_math.tree_add_scale(updates, standard_deviation, noise), new_state

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
