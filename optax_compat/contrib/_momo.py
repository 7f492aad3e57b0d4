"""MoMo: SGD and Adam with a Polyak-type adaptive step size (mirrors ``optax/contrib/_momo.py``).

References:
  Schaipp et al., `MoMo: Momentum Models for Adaptive Learning Rates
  <https://arxiv.org/abs/2305.07583>`_, 2023.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics, transform
from optax_compat.contrib._dadapt_adamw import scalar_state
from optax_compat.tree_utils import _tree_math

Scalar = transform.Scalar

# ``jnp.finfo(float).eps``: Optax compares the squared norm with the float64 machine epsilon
# whatever the dtype of the params.
_FLOAT_EPS = sys.float_info.epsilon


class MomoState(NamedTuple):
    """State of :func:`momo`.

    Attributes:
      exp_avg: the momentum (moving average of the gradients).
      barf: the moving average of the loss values.
      gamma: the moving average of ``<gradient, params>``.
      lb: the current lower bound of the loss.
      count: the number of updates so far (0-d ``int32``).
    """

    exp_avg: base.Updates
    barf: torch.Tensor
    gamma: torch.Tensor
    lb: torch.Tensor
    count: torch.Tensor


class MomoAdamState(NamedTuple):
    """State of :func:`momo_adam`.

    Attributes:
      exp_avg: the moving average of the gradients.
      exp_avg_sq: the moving average of the squared gradients.
      barf: the moving average of the loss values.
      gamma: the moving average of ``<gradient, params>``.
      lb: the current lower bound of the loss.
      count: the number of updates so far (0-d ``int32``).
    """

    exp_avg: base.Updates
    exp_avg_sq: base.Updates
    barf: torch.Tensor
    gamma: torch.Tensor
    lb: torch.Tensor
    count: torch.Tensor


def _check_update_args(name: str, params: Optional[base.Params], value: Any) -> None:
    if params is None:
        raise ValueError(f"{bb.NO_PARAMS_MSG} ({name} needs them.)")
    if value is None:
        raise ValueError("You need to pass the latest loss value to Momo as `value=`, e.g. "
                         "from `torch.func.grad_and_value`.")


def _learning_rate(learning_rate: base.ScalarOrSchedule, count: torch.Tensor,
                   dtype: torch.dtype) -> Scalar:
    """The step size bound at ``count``; a tensor value is taken in the state's ``dtype``."""
    return _in_dtype(bb.value_at(learning_rate, count), dtype)


def _average(moment: torch.Tensor, value: Any, decay: Scalar) -> torch.Tensor:
    """``decay * moment + (1 - decay) * value`` with ``value`` in the dtype of ``moment``."""
    value = torch.as_tensor(value, dtype=moment.dtype, device=moment.device)
    return decay * moment + (1 - decay) * value


def _in_dtype(value: Scalar, dtype: torch.dtype) -> Scalar:
    """A tensor ``value`` cast to ``dtype``; Python numbers are returned as they are."""
    return value.to(dtype) if isinstance(value, torch.Tensor) else value


def _momo_step(
    barf: torch.Tensor, gamma: torch.Tensor, iprod: torch.Tensor, direction_norm: torch.Tensor,
    previous_lb: torch.Tensor, alpha: Scalar, weight_decay: Scalar, lower_bound: Scalar,
    adapt_lower_bound: bool, bias_correction: Scalar = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The adaptive step size ``tau`` and the next lower bound, shared by both MoMo variants.

    ``bias_correction`` is Adam's first-moment correction ``1 - b1 ** t`` for MoMo-Adam and 1
    for MoMo (where multiplying or dividing by it is exact).
    """
    decay_factor = 1 + alpha * weight_decay
    if adapt_lower_bound:
        cap = decay_factor * (barf - gamma) + iprod
        reset_lb = torch.clamp_min(cap / (2 * bias_correction * decay_factor), lower_bound)
        this_lb = torch.where(cap < decay_factor * bias_correction * previous_lb,
                              reset_lb.to(previous_lb.dtype), previous_lb)
    else:
        this_lb = previous_lb
    numerator = torch.clamp_min(
        decay_factor * (barf - bias_correction * this_lb - gamma) + iprod, 0.0)
    t1 = numerator / direction_norm
    # No step when the direction vanishes.
    t1 = torch.where(direction_norm <= _FLOAT_EPS, torch.zeros_like(t1), t1)
    tau = torch.minimum(t1, torch.as_tensor(alpha / bias_correction, dtype=t1.dtype,
                                            device=t1.device))
    if not adapt_lower_bound:
        return tau, previous_lb
    new_lb = ((barf + iprod - gamma) - 0.5 * tau * direction_norm) / bias_correction
    return tau, torch.clamp_min(new_lb, lower_bound).to(previous_lb.dtype)


def _decayed_step(params: tm.Leaves, directions: tm.Leaves, tau: torch.Tensor, alpha: Scalar,
                  weight_decay: Scalar) -> tm.Leaves:
    """``-(alpha * wd) / (1 + alpha * wd) * p - tau * d`` per leaf."""
    shrink = -(alpha * weight_decay) / (1 + alpha * weight_decay)
    steps = tm.mul(directions, tm.scalar_like(tau, directions))
    if bb.is_zero(shrink):
        return tm.neg(steps)
    return tm.sub(tm.mul(params, tm.scalar_like(shrink, params)), steps)


def momo(
    learning_rate: base.ScalarOrSchedule = 1.0,
    beta: Scalar = 0.9,
    lower_bound: Scalar = 0.0,
    weight_decay: Scalar = 0.0,
    adapt_lower_bound: bool = False,
) -> base.GradientTransformationExtraArgs:
    """SGD with momentum and the adaptive (Polyak-type) step size of MoMo.

    The step size is ``min(learning_rate, t)`` where ``t`` comes from a model of the loss built
    from its known lower bound. The loss of the current batch must be passed to ``update`` as
    the keyword argument ``value``.

    Args:
      learning_rate: the largest step size (a number, 0-d tensor or schedule); can be large.
      beta: the momentum coefficient.
      lower_bound: a lower bound of the loss (0 suits most losses).
      weight_decay: decoupled weight decay.
      adapt_lower_bound: estimate the lower bound on the fly instead of trusting
        ``lower_bound``.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a :class:`MomoState`,
      whose ``update(updates, state, params, *, value)`` returns the params' updates.

    References:
      Schaipp et al., `MoMo: Momentum Models for Adaptive Learning Rates
      <https://arxiv.org/abs/2305.07583>`_, 2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.momo(learning_rate=1.0)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     value = (params["w"] ** 2).sum()
      ...     grads = {"w": 2 * params["w"]}
      ...     updates, state = opt.update(grads, state, params, value=value)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.4737, -0.9475])
    """

    def init_fn(params: base.Params) -> MomoState:
        return MomoState(exp_avg=_tree_math.tree_zeros_like(params),
                         barf=scalar_state(params, 0.0), gamma=scalar_state(params, 0.0),
                         lb=scalar_state(params, lower_bound),
                         count=bb.zero_count(params))

    def update_fn(updates: base.Updates, state: MomoState, params: Optional[base.Params],
                  *, value: Any, **extra_args: Any) -> tuple[base.Updates, MomoState]:
        del extra_args
        _check_update_args("momo", params, value)
        gs, spec = tm.float_leaves(updates)
        ps = tm.leaves_like(params, spec, "params", reference=updates)
        moments = tm.leaves_like(state.exp_avg, spec, "state.exp_avg", reference=updates)
        count = state.count
        # The first step initialises the averages with the first gradient and loss.
        decay = torch.where(count == 0, torch.zeros_like(state.barf),
                            torch.as_tensor(beta, dtype=state.barf.dtype,
                                            device=state.barf.device))
        barf = _average(state.barf, value, decay)
        exp_avg = tm.add(tm.mul(moments, tm.scalar_like(decay, moments)),
                         tm.mul(gs, tm.scalar_like(1 - decay, gs)))
        gamma = decay * state.gamma + (1 - decay) * tm.vdot(gs, ps)
        direction_norm = tm.sum_of_squares(exp_avg)
        iprod = tm.vdot(exp_avg, ps)
        alpha = _learning_rate(learning_rate, count, barf.dtype)
        tau, new_lb = _momo_step(barf, gamma, iprod, direction_norm, state.lb, alpha,
                                 weight_decay, lower_bound, adapt_lower_bound)
        step = _decayed_step(ps, exp_avg, tau, alpha, weight_decay)
        return tm.unflatten(spec, step), MomoState(
            exp_avg=tm.unflatten(spec, exp_avg), barf=barf, gamma=gamma, lb=new_lb,
            count=numerics.safe_increment(count))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def momo_adam(
    learning_rate: base.ScalarOrSchedule = 1e-2,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    lower_bound: Scalar = 0.0,
    weight_decay: Scalar = 0.0,
    adapt_lower_bound: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Adam(W) with the adaptive (Polyak-type) step size of MoMo.

    The loss of the current batch must be passed to ``update`` as the keyword argument
    ``value``.

    Args:
      learning_rate: the largest step size (a number, 0-d tensor or schedule).
      b1: decay of the moving average of the gradients.
      b2: decay of the moving average of the squared gradients.
      eps: added to the root of the second moment.
      lower_bound: a lower bound of the loss (0 suits most losses).
      weight_decay: decoupled weight decay, as in AdamW.
      adapt_lower_bound: estimate the lower bound on the fly instead of trusting
        ``lower_bound``.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a :class:`MomoAdamState`,
      whose ``update(updates, state, params, *, value)`` returns the params' updates.

    References:
      Schaipp et al., `MoMo: Momentum Models for Adaptive Learning Rates
      <https://arxiv.org/abs/2305.07583>`_, 2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.momo_adam(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     value = (params["w"] ** 2).sum()
      ...     grads = {"w": 2 * params["w"]}
      ...     updates, state = opt.update(grads, state, params, value=value)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7016, -1.7006])
    """

    def init_fn(params: base.Params) -> MomoAdamState:
        return MomoAdamState(exp_avg=_tree_math.tree_zeros_like(params),
                             exp_avg_sq=_tree_math.tree_zeros_like(params),
                             barf=scalar_state(params, 0.0), gamma=scalar_state(params, 0.0),
                             lb=scalar_state(params, lower_bound),
                             count=bb.zero_count(params))

    def update_fn(updates: base.Updates, state: MomoAdamState, params: Optional[base.Params],
                  *, value: Any, **extra_args: Any) -> tuple[base.Updates, MomoAdamState]:
        del extra_args
        _check_update_args("momo_adam", params, value)
        gs, spec = tm.float_leaves(updates)
        ps = tm.leaves_like(params, spec, "params", reference=updates)
        moments = tm.leaves_like(state.exp_avg, spec, "state.exp_avg", reference=updates)
        squares = tm.leaves_like(state.exp_avg_sq, spec, "state.exp_avg_sq", reference=updates)
        count = state.count
        count_inc = numerics.safe_increment(count)
        # Tensor hyperparameters are taken in the dtype of what they scale, so they never
        # promote the state; Python numbers stay weakly typed, as in Optax.
        decay1 = _in_dtype(b1, state.barf.dtype)
        barf = _average(state.barf, value, decay1)
        exp_avg = tm.add(tm.mul(moments, tm.scalar_like(b1, moments)),
                         tm.mul(gs, tm.scalar_like(1 - b1, gs)))
        exp_avg_sq = tm.add(tm.mul(squares, tm.scalar_like(b2, squares)),
                            tm.mul(tm.square(gs), tm.scalar_like(1 - b2, gs)))
        second_correction = bb.bias_correction(b2, count_inc, gs).to(barf.dtype)
        second_moments = tm.div(exp_avg_sq, tm.scalar_like(second_correction, exp_avg_sq))
        precond = tm.add(tm.sqrt(second_moments), tm.scalar_like(eps, second_moments))
        weighted = tm.div(exp_avg, precond)
        direction_norm = tm.vdot(exp_avg, weighted)
        gamma = decay1 * state.gamma + (1 - decay1) * tm.vdot(gs, ps)
        iprod = tm.vdot(exp_avg, ps)
        alpha = _learning_rate(learning_rate, count, barf.dtype)
        first_correction = bb.bias_correction(b1, count_inc, gs).to(barf.dtype)
        tau, new_lb = _momo_step(barf, gamma, iprod, direction_norm, state.lb, alpha,
                                 weight_decay, lower_bound, adapt_lower_bound,
                                 bias_correction=first_correction)
        step = _decayed_step(ps, weighted, tau, alpha, weight_decay)
        return tm.unflatten(spec, step), MomoAdamState(
            exp_avg=tm.unflatten(spec, exp_avg), exp_avg_sq=tm.unflatten(spec, exp_avg_sq),
            barf=barf, gamma=gamma, lb=new_lb, count=count_inc)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
