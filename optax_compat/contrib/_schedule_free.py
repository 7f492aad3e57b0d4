"""Schedule-Free optimization (mirrors ``optax/contrib/_schedule_free.py``).

The wrapper replaces the momentum of a base optimizer by interpolation and averaging: the base
optimizer moves a sequence ``z``, its weighted average ``x`` is the point to evaluate, and the
gradients are taken at ``y = b1 * x + (1 - b1) * z``, which is what the params hold.

References:
  Defazio et al., `The Road Less Scheduled <https://arxiv.org/abs/2405.15682>`_, 2024.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import alias, base, numerics, transform
from optax_compat.schedules import _schedule
from optax_compat.transforms import _adding, _combining
from optax_compat.tree_utils import _casting

Scalar = transform.Scalar


class ScheduleFreeState(NamedTuple):
    """State of :func:`schedule_free`.

    Attributes:
      b1: the interpolation coefficient between ``x`` and ``z``.
      weight_sum: the sum of the averaging weights so far.
      step_count: the step number, starting at 1 (0-d ``int32``).
      max_lr: the largest learning rate seen so far.
      base_optimizer_state: the state of the base optimizer.
      z: the sequence moved by the base optimizer.
    """

    b1: torch.Tensor
    weight_sum: torch.Tensor
    step_count: torch.Tensor
    max_lr: torch.Tensor
    base_optimizer_state: base.OptState
    z: base.Params


def _promoted(xs: tm.Leaves, factor: Scalar) -> tuple[tm.Leaves, Scalar]:
    """The leaves and ``factor`` in their JAX-promoted dtypes, for a factor the state holds.

    Optax's ``ck`` and ``state.b1`` are 0-d arrays in the lowest dtype of the params; JAX
    promotes a ``z`` of lower precision (``state_dtype``) when it meets them. A Python number
    is weakly typed and changes nothing.
    """
    if not isinstance(factor, torch.Tensor):
        return xs, factor
    promoted = [x.to(torch.promote_types(x.dtype, factor.dtype)) for x in xs]
    return promoted, tm.scalar_like(factor, promoted)


def _scale(xs: tm.Leaves, factor: Scalar) -> tm.Leaves:
    """``factor * x`` per leaf, with JAX's promotion by a factor the state holds."""
    return tm.mul(*_promoted(xs, factor))


def _average_point(ys: tm.Leaves, zs: tm.Leaves, b1: Scalar) -> tm.Leaves:
    """``x = (y - (1 - b1) * z) / b1``: the averaged point, recovered from ``y`` and ``z``.

    ``b1`` is ``state.b1``, a Python number, or a tensor in the lowest dtype of the params.
    """
    return tm.div(*_promoted(tm.sub(ys, _scale(zs, 1.0 - b1)), b1))


def schedule_free_eval_params(state: base.OptState, params: base.Params) -> base.Params:
    """The params to evaluate a model trained with :func:`schedule_free` at (the ``x`` sequence).

    Args:
      state: a :class:`ScheduleFreeState`.
      params: the params being trained (the ``y`` sequence).

    Returns:
      ``(params - (1 - b1) * z) / b1``, a tree like ``params``.

    Raises:
      ValueError: if ``state`` has no ``b1`` or ``z``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.schedule_free(optax.sgd(0.1), learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> optax.contrib.schedule_free_eval_params(state, params)["w"]
      tensor([ 0.6459, -1.2917])
    """
    b1 = getattr(state, "b1", None)
    z = getattr(state, "z", None)
    if b1 is None or z is None:
        raise ValueError("schedule_free_eval_params requires a ScheduleFreeState as input.")
    ys, spec = tm.flatten(params)
    zs = tm.leaves_like(z, spec, "state.z", reference=params)
    return tm.unflatten(spec, _average_point(ys, zs, b1))


def _in_dtype(value: Scalar, dtype: torch.dtype) -> Scalar:
    """A tensor ``value`` cast to ``dtype``; Python numbers are returned as they are."""
    return value.to(dtype) if isinstance(value, torch.Tensor) else value


def _averaging_weight(weight: torch.Tensor, total_weight: torch.Tensor) -> torch.Tensor:
    """``weight / total_weight``, 0 where it is NaN from a vanishing learning rate."""
    nan = torch.full_like(weight, float("nan"))
    ratio = torch.nan_to_num(weight / total_weight, nan=0.0, posinf=float("inf"))
    return torch.where(torch.isnan(weight) | torch.isnan(total_weight), nan, ratio)


def schedule_free(
    base_optimizer: base.GradientTransformation,
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    weight_lr_power: Scalar = 2.0,
    state_dtype: Optional[torch.dtype] = None,
) -> base.GradientTransformationExtraArgs:
    r"""Makes ``base_optimizer`` schedule-free.

    With plain gradient descent as the base optimizer one step is

    .. math::

      y_t = (1 - \beta_1) z_t + \beta_1 x_t, \quad
      z_{t+1} = z_t - \gamma \nabla f(y_t), \quad
      x_{t+1} = (1 - c_{t+1}) x_t + c_{t+1} z_{t+1},

    where the params hold ``y`` and ``c`` weights each step by its (maximal so far) learning
    rate to the power ``weight_lr_power``. The base optimizer should have no momentum; use
    :func:`schedule_free_eval_params` to get the ``x`` params for evaluation.

    Args:
      base_optimizer: the optimizer that moves ``z``.
      learning_rate: the learning rate (with warm-up, without decay) or its schedule, used to
        weight the average.
      b1: the interpolation coefficient, strictly positive.
      weight_lr_power: the power of the learning rate in the averaging weights.
      state_dtype: dtype of ``z``; that of the params when ``None``.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a
      :class:`ScheduleFreeState`; extra arguments of ``update`` go to the base optimizer.

    References:
      Defazio et al., `The Road Less Scheduled <https://arxiv.org/abs/2405.15682>`_, 2024.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.schedule_free(optax.sgd(0.1), learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> optax.contrib.schedule_free_eval_params(state, params)["w"]
      tensor([ 0.6459, -1.2917])
    """
    state_dtype = bb.canonical_dtype(state_dtype)
    base_optimizer = base.with_extra_args_support(base_optimizer)

    def init_fn(params: base.Params) -> ScheduleFreeState:
        dtype = _casting.tree_dtype(params, "lowest")
        count = bb.zero_count(params)
        # A distinct copy: ``z`` must not alias params that may be updated in place.
        z = tm.tree_map(lambda p: p.to(state_dtype or p.dtype, copy=True), params)
        return ScheduleFreeState(
            b1=torch.as_tensor(b1, dtype=dtype, device=count.device).clone(),
            weight_sum=torch.zeros((), dtype=dtype, device=count.device),
            step_count=count + 1,
            max_lr=torch.zeros((), dtype=dtype, device=count.device),
            base_optimizer_state=base_optimizer.init(params), z=z)

    @bb.elementwise_if(base_optimizer)
    def update_fn(grads: base.Updates, state: ScheduleFreeState,
                  params: Optional[base.Params] = None,
                  **extra_args: Any) -> tuple[base.Updates, ScheduleFreeState]:
        if params is None:
            raise ValueError(bb.NO_PARAMS_MSG + " (schedule_free needs them.)")
        # Tensor hyperparameters are taken in the params' (lowest) dtype, the dtype of the
        # scalar state, so that they never promote it or the params.
        dtype = state.max_lr.dtype
        lr = bb.value_at(learning_rate, state.step_count)
        max_lr = torch.maximum(state.max_lr, torch.as_tensor(lr, dtype=dtype,
                                                             device=state.max_lr.device))
        weight = max_lr ** _in_dtype(weight_lr_power, dtype)
        weak_b1 = _in_dtype(b1, dtype)
        total_weight = state.weight_sum + weight
        ck = _averaging_weight(weight, total_weight)

        base_updates, base_state = base_optimizer.update(
            grads, state.base_optimizer_state, params, **extra_args)
        ys, spec = tm.flatten(params)
        old_zs = tm.leaves_like(state.z, spec, "state.z", reference=params)
        steps = tm.leaves_like(base_updates, spec, "the base optimizer's updates",
                               reference=params)
        zs = [z.to(old.dtype) for z, old in zip(tm.add(old_zs, steps), old_zs)]
        # ``x`` is recomputed from ``y`` rather than stored, which keeps it exact even when a
        # transformation wrapped around this one modifies ``y``.
        xs = tm.add(_scale(_average_point(ys, old_zs, weak_b1), 1.0 - ck), _scale(zs, ck))
        new_ys = tm.add(_scale(xs, weak_b1), _scale(zs, 1.0 - weak_b1))
        return tm.unflatten(spec, tm.sub(new_ys, ys)), ScheduleFreeState(
            b1=state.b1, weight_sum=total_weight,
            step_count=numerics.safe_increment(state.step_count), max_lr=max_lr,
            base_optimizer_state=base_state, z=tm.unflatten(spec, zs))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def _with_warmup(learning_rate: Scalar, warmup_steps: Optional[int]) -> base.ScalarOrSchedule:
    if warmup_steps is None:
        return learning_rate
    return _schedule.warmup_constant_schedule(init_value=0, peak_value=learning_rate,
                                              warmup_steps=warmup_steps)


def schedule_free_sgd(
    learning_rate: Scalar = 1.0,
    warmup_steps: Optional[int] = None,
    b1: Scalar = 0.9,
    weight_decay: Optional[Scalar] = None,
    weight_lr_power: Scalar = 2.0,
    state_dtype: Optional[torch.dtype] = None,
) -> base.GradientTransformationExtraArgs:
    """Schedule-free SGD: :func:`schedule_free` around plain SGD.

    Args:
      learning_rate: the SGD learning rate.
      warmup_steps: length of a linear warm-up from 0, if any.
      b1: the interpolation coefficient, strictly positive.
      weight_decay: weight decay added to the gradients before the learning rate (so it is
        multiplied by it, as in PyTorch); none when ``None``.
      weight_lr_power: the power of the learning rate in the averaging weights.
      state_dtype: dtype of the ``z`` sequence.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a
      :class:`ScheduleFreeState`.

    References:
      Defazio et al., `The Road Less Scheduled <https://arxiv.org/abs/2405.15682>`_, 2024.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.schedule_free_sgd(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.6310, -1.2621])
    """
    learning_rate = _with_warmup(learning_rate, warmup_steps)
    optimizer = alias.sgd(learning_rate)
    if weight_decay is not None:
        optimizer = _combining.chain(_adding.add_decayed_weights(weight_decay), optimizer)
    return schedule_free(optimizer, learning_rate=learning_rate, b1=b1,
                         weight_lr_power=weight_lr_power, state_dtype=state_dtype)


def schedule_free_adamw(
    learning_rate: Scalar = 0.0025,
    warmup_steps: Optional[int] = None,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    weight_decay: Scalar = 0.0,
    weight_lr_power: Scalar = 2.0,
    state_dtype: Optional[torch.dtype] = None,
) -> base.GradientTransformationExtraArgs:
    """Schedule-free AdamW: :func:`schedule_free` around AdamW without momentum.

    Adam with ``b1 = 0`` is RMSProp with ``eps`` outside the root and bias correction, which
    is what the base optimizer uses (no unused first moment is stored).

    Args:
      learning_rate: the AdamW learning rate.
      warmup_steps: length of a linear warm-up from 0, if any.
      b1: the interpolation coefficient, strictly positive.
      b2: decay of the moving average of squared gradients.
      eps: added to the root of the second moment.
      weight_decay: decoupled weight decay.
      weight_lr_power: the power of the learning rate in the averaging weights.
      state_dtype: dtype of the ``z`` sequence.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a
      :class:`ScheduleFreeState`.

    References:
      Defazio et al., `The Road Less Scheduled <https://arxiv.org/abs/2405.15682>`_, 2024.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.schedule_free_adamw(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7968, -1.7933])
    """
    learning_rate = _with_warmup(learning_rate, warmup_steps)
    optimizer = _combining.chain(
        transform.scale_by_rms(decay=b2, eps=eps, eps_in_sqrt=False, bias_correction=True),
        _adding.add_decayed_weights(weight_decay),
        transform.scale_by_learning_rate(learning_rate),
    )
    return schedule_free(optimizer, learning_rate=learning_rate, b1=b1,
                         weight_lr_power=weight_lr_power, state_dtype=state_dtype)
