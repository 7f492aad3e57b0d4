"""Gradient transformations (mirrors ``optax/_src/transform.py``).

Every transformation here has Optax's name, signature, defaults and state NamedTuple, and
computes Optax's numbers. The arithmetic goes through the building blocks
(:mod:`optax_compat._runtime.tree_math`):
``update`` flattens the incoming updates once, checks every state buffer against that
structure with :func:`~optax_compat._runtime.tree_math.leaves_like` (a mismatch raises
``ValueError`` naming the first differing path), runs one ``torch._foreach_*`` kernel per
operation over all leaves, and unflattens once. A leaf that is not a floating-point tensor
raises ``TypeError`` naming its path; a transformation that needs ``params`` and gets ``None``
raises ``ValueError`` naming itself. Errors are raised before any state is built, so no
partial state ever escapes.

Purity and differentiability:
  By default ``init`` and ``update`` never mutate their arguments: new state buffers and new
  updates are returned. Hyperparameters may be 0-d tensors that require grad, and inputs may
  require grad; the result is then differentiable with ``torch.autograd``. Counters are
  ``int32`` 0-d tensors on the device of the params, and nothing in ``update`` synchronises
  with the device (``torch.where`` stands for ``lax.cond``/``jnp.where``).

The opt-in in-place path (TorchOpt's ``inplace=True``):
  The transformations used on the hot path of the optimizer aliases (:func:`scale`,
  :func:`scale_by_learning_rate`, :func:`scale_by_schedule`, :func:`scale_by_sign`,
  :func:`scale_by_adam`, :func:`scale_by_rms`, :func:`scale_by_stddev`, :func:`scale_by_rss`,
  :func:`scale_by_lion`, :func:`scale_by_adamax`, :func:`scale_by_radam`,
  :func:`scale_by_adadelta`) are :class:`~optax_compat.GradientTransformationExtraArgs`
  whose ``update`` takes a keyword-only ``inplace: bool = False`` (combinators such as
  ``chain`` pass it through as an extra argument). With ``inplace=True`` they write the new
  state into the buffers of the state they were given (the returned state holds those same
  tensors) and may write the returned updates into the incoming ``updates`` tensors, which
  must then not be used afterwards. The numbers are bit-for-bit those of the pure path. It is
  meant for steps nobody differentiates through; the pure path is the default.

Speed:
  On the CPU an out-of-place kernel over a large tensor costs mostly the fresh memory it
  writes, so the hot transforms allocate as few buffers as they can. :func:`scale_by_adam`
  (on the Adam engine, :mod:`optax_compat._runtime.adam_engine`), when nothing requires grad,
  hyperparameters are numbers, the moments have the updates' dtypes and ``nesterov`` is off,
  allocates only its two new moments and one direction buffer
  (nothing with ``inplace=True``); otherwise it follows Optax's formula operation for
  operation.

Not mirrored: the legacy aliases Optax keeps in its ``transform`` module (``trace``, ``ema``,
``add_noise``, ``add_decayed_weights`` and their states); they live in
:mod:`optax_compat.transforms`, which imports this module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Literal, NamedTuple, Optional, Union

import optree
import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import adam_engine
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics

Scalar = Union[float, int, torch.Tensor]
Leaves = tm.Leaves

# ----------------------------------------------------------------------------------------------
# Shared helpers.


def _where_positive_rsqrt(xs: Leaves, eps: Scalar) -> Leaves:
    """``rsqrt(x + eps)`` where ``x > 0``, else 0 (``jnp.where``, elementwise)."""
    roots = tm.rsqrt(tm.add(xs, eps))
    return [torch.where(x > 0, r, torch.zeros((), dtype=r.dtype, device=r.device))
            for x, r in zip(xs, roots)]


def _sign(xs: Leaves, inplace: bool = False) -> Leaves:
    """``jnp.sign`` per leaf: ``z / |z|`` for complex leaves; written into ``xs`` if in place."""
    if any(map(torch.is_complex, xs)):
        return [torch.sgn(x) for x in xs]
    return tm.sign_(xs) if inplace else tm.sign(xs)


def _with_extra_args(init_fn: Callable[..., Any],
                     update_fn: Callable[..., Any]) -> base.GradientTransformationExtraArgs:
    return base.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------------------------
# Fixed scalings.


def scale(step_size: Scalar) -> base.GradientTransformationExtraArgs:
    """Scales updates by a fixed scalar ``step_size``.

    Args:
      step_size: a number or a 0-d tensor (which may require grad).

    Returns:
      A stateless transformation; its ``update`` accepts ``inplace``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale(-0.1)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([-0.0500,  0.1000])
    """

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        factor = tm.scalar_like(step_size, gs)
        scaled = tm.mul_(gs, factor) if inplace else tm.mul(gs, factor)
        return tm.unflatten(spec, scaled), state

    return _with_extra_args(base.init_empty_state, update_fn)


class ScaleByScheduleState(NamedTuple):
    """The step count of :func:`scale_by_schedule`."""

    count: torch.Tensor  # 0-d int32


def scale_by_schedule(step_size_fn: base.Schedule) -> base.GradientTransformationExtraArgs:
    """Scales updates by ``step_size_fn(count)``, the count of updates so far.

    Args:
      step_size_fn: maps the step count (an ``int32`` 0-d tensor) to a step size.

    Returns:
      A transformation with a :class:`ScaleByScheduleState`; its ``update`` accepts
      ``inplace``.

    Raises:
      TypeError: if ``step_size_fn`` is not callable.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_schedule(optax.linear_schedule(1.0, 0.0, 10))
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.5000, -1.0000])
    """
    if not callable(step_size_fn):
        raise TypeError(f"step_size_fn must be callable, got {type(step_size_fn).__name__}.")

    def init_fn(params):
        return ScaleByScheduleState(count=bb.zero_count(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        # Optax casts the step size to each update's dtype before multiplying.
        factor = tm.scalar_like(step_size_fn(state.count), gs)
        scaled = tm.mul_(gs, factor) if inplace else tm.mul(gs, factor)
        return (tm.unflatten(spec, scaled),
                ScaleByScheduleState(count=numerics.safe_increment(state.count)))

    return _with_extra_args(init_fn, update_fn)


def scale_by_learning_rate(
    learning_rate: Optional[base.ScalarOrSchedule] = None,
    *,
    flip_sign: bool = True,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by the learning rate, negated by default (gradient descent).

    Args:
      learning_rate: a number, a 0-d tensor, or a schedule of the step count; ``None`` means
        no scaling.
      flip_sign: scale by ``-learning_rate`` (the default) instead of ``learning_rate``.

    Returns:
      :func:`scale` or :func:`scale_by_schedule` (the identity for ``None``); ``update``
      accepts ``inplace``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_learning_rate(0.1)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([-0.0500,  0.1000])
    """
    bb.check_hyperparameter("learning_rate", learning_rate)
    if learning_rate is None:
        return base.with_extra_args_support(base.identity())
    sign = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


def scale_by_sign() -> base.GradientTransformationExtraArgs:
    """Replaces each update by its sign.

    Returns:
      A stateless transformation; its ``update`` accepts ``inplace``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_sign()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1., -1.])
    """

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        return tm.unflatten(spec, bb.emit(gs, _sign(gs, inplace), inplace)), state

    return _with_extra_args(base.init_empty_state, update_fn)


# ----------------------------------------------------------------------------------------------
# Adaptive moments.


class ScaleByRssState(NamedTuple):
    """The sum of squared gradients so far."""

    sum_of_squares: base.Updates


def scale_by_rss(initial_accumulator_value: Scalar = 0.1,
                 eps: Scalar = 1e-7) -> base.GradientTransformationExtraArgs:
    """Scales updates by the inverse root of the sum of all squared gradients (AdaGrad).

    Args:
      initial_accumulator_value: starting value of the accumulators, at least 0.
      eps: added under the square root.

    Returns:
      A transformation with a :class:`ScaleByRssState`; ``update`` accepts ``inplace``.

    References:
      Duchi et al, `Adaptive Subgradient Methods for Online Learning and Stochastic
      Optimization <https://jmlr.org/papers/v12/duchi11a.html>`_, 2011.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_rss()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.8452, -0.9535])
    """

    def formula(gs: Leaves, old: Leaves, inplace: bool) -> tuple[Leaves, Leaves]:
        del inplace
        sums = tm.add(tm.abs_sq(gs), old)
        return tm.mul(_where_positive_rsqrt(sums, eps), gs), sums

    def init_fn(params):
        return ScaleByRssState(sum_of_squares=bb.full(params, initial_accumulator_value))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        old = bb.state_leaves(state.sum_of_squares, spec, updates, "state.sum_of_squares")
        scaled, sums = bb.in_blocks(formula, gs, old, inplace=inplace)
        return (tm.unflatten(spec, scaled),
                ScaleByRssState(sum_of_squares=tm.unflatten(spec, sums)))

    return _with_extra_args(init_fn, update_fn)


class ScaleByRmsState(NamedTuple):
    """The moving average of squared updates of :func:`scale_by_rms`."""

    nu: base.Updates


class ScaleByRmsWithCountState(NamedTuple):
    """The state of :func:`scale_by_rms` with ``bias_correction=True``."""

    count: torch.Tensor  # 0-d int32
    nu: base.Updates


def _second_moment(nus: Leaves, gs: Leaves, decay: Scalar, inplace: bool) -> Leaves:
    """``decay * nu + (1 - decay) * |g| ** 2``, one foreach kernel per step of the formula.

    When nothing is differentiated and dtypes agree it runs ``mul`` then ``addcmul_`` on a
    fresh buffer (or on ``nus`` itself when in place: the same kernels, the same numbers);
    otherwise Optax's formula, out of place.
    """
    if (bb.is_number(decay) and tm.same_dtypes(nus, gs) and not any(g.is_complex() for g in gs)
            and not tm.is_recording(nus, gs)):
        return bb.moving_average(nus, gs, decay, order=2, inplace=inplace, convention="torch")
    return bb.store(nus, bb.moving_average(nus, tm.abs_sq(gs), decay), inplace)


def _rms_scaling(nu_hats: Leaves, eps: Scalar, eps_in_sqrt: bool) -> Leaves:
    if eps_in_sqrt:
        return tm.rsqrt(tm.add(nu_hats, eps))
    return tm.reciprocal_(tm.add(tm.sqrt(nu_hats), eps))


def _scale_updates(scaling: Leaves, gs: Leaves, inplace: bool) -> Leaves:
    """``scaling * g``, written into the updates when in place (same kernel, same numbers)."""
    if inplace and tm.same_dtypes(gs, scaling):
        return tm.mul_(gs, scaling)
    return tm.mul(scaling, gs)


def scale_by_rms(
    decay: Scalar = 0.9,
    eps: Scalar = 1e-8,
    initial_scale: Scalar = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by the root of the moving average of their squares (RMSProp).

    Args:
      decay: decay of the moving average of squared updates.
      eps: stabilises the denominator.
      initial_scale: initial value of the second moment.
      eps_in_sqrt: add ``eps`` under the square root (else outside it).
      bias_correction: correct the moving average for its zero (or ``initial_scale``) start.

    Returns:
      A transformation with a :class:`ScaleByRmsState` (a :class:`ScaleByRmsWithCountState`
      with bias correction); ``update`` accepts ``inplace``.

    References:
      Hinton, `Overview of mini-batch gradient descent
      <www.cs.toronto.edu/~tijmen/csc321/slides/lecture_slides_lec6.pdf>`_, 2012.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_rms()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 3.1623, -3.1623])
    """

    def init_fn(params):
        nu = bb.full(params, initial_scale)
        if bias_correction:
            return ScaleByRmsWithCountState(count=bb.zero_count(params), nu=nu)
        return ScaleByRmsState(nu=nu)

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        count_inc = numerics.safe_increment(state.count) if bias_correction else None
        # In the widest dtype of the new second moments, which promote ``nus`` and ``gs``.
        correction = bb.bias_correction(decay, count_inc, gs + nus) if bias_correction else None

        def formula(gs: Leaves, nus: Leaves, inplace: bool) -> tuple[Leaves, Leaves]:
            new_nus = _second_moment(nus, gs, decay, inplace)
            nu_hats = bb.debias(new_nus, correction) if bias_correction else new_nus
            return _scale_updates(_rms_scaling(nu_hats, eps, eps_in_sqrt), gs, inplace), new_nus

        scaled, new_nus = bb.in_blocks(formula, gs, nus, inplace=inplace)
        nu = tm.unflatten(spec, new_nus)
        new_state = (ScaleByRmsWithCountState(count=count_inc, nu=nu) if bias_correction
                     else ScaleByRmsState(nu=nu))
        return tm.unflatten(spec, scaled), new_state

    return _with_extra_args(init_fn, update_fn)


class ScaleByRStdDevState(NamedTuple):
    """The moving averages of updates and of their squares of :func:`scale_by_stddev`."""

    mu: base.Updates
    nu: base.Updates


class ScaleByRStdDevWithCountState(NamedTuple):
    """The state of :func:`scale_by_stddev` with ``bias_correction=True``."""

    count: torch.Tensor  # 0-d int32
    mu: base.Updates
    nu: base.Updates


def scale_by_stddev(
    decay: Scalar = 0.9,
    eps: Scalar = 1e-8,
    initial_scale: Scalar = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by the inverse of their moving (centered) standard deviation.

    Args:
      decay: decay of the moving averages.
      eps: stabilises the denominator.
      initial_scale: initial value of the second moment.
      eps_in_sqrt: add ``eps`` under the square root (else outside it).
      bias_correction: correct both moving averages for their start.

    Returns:
      A transformation with a :class:`ScaleByRStdDevState` (with a count when bias
      corrected); ``update`` accepts ``inplace``.

    References:
      Graves, `Generating Sequences With Recurrent Neural Networks
      <https://arxiv.org/abs/1308.0850>`_, 2013.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_stddev()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 3.3333, -3.3333])
    """

    def init_fn(params):
        mu = bb.zeros(params)
        nu = bb.full(params, initial_scale)
        if bias_correction:
            return ScaleByRStdDevWithCountState(count=bb.zero_count(params), mu=mu, nu=nu)
        return ScaleByRStdDevState(mu=mu, nu=nu)

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        count_inc = numerics.safe_increment(state.count) if bias_correction else None
        # In the widest dtype of the new first moments, which promote ``mus`` and ``gs``.
        correction = bb.bias_correction(decay, count_inc, gs + mus) if bias_correction else None

        def formula(gs: Leaves, mus: Leaves, nus: Leaves,
                    inplace: bool) -> tuple[Leaves, Leaves, Leaves]:
            del inplace
            new_mus = bb.moving_average(mus, gs, decay)
            new_nus = bb.moving_average(nus, tm.abs_sq(gs), decay)
            mu_hats, nu_hats = new_mus, new_nus
            if bias_correction:
                mu_hats, nu_hats = bb.debias(new_mus, correction), bb.debias(new_nus, correction)
            variances = tm.sub(nu_hats, tm.abs_sq(mu_hats))
            return tm.mul(_rms_scaling(variances, eps, eps_in_sqrt), gs), new_mus, new_nus

        scaled, new_mus, new_nus = bb.in_blocks(formula, gs, mus, nus, inplace=inplace)
        mu = tm.unflatten(spec, new_mus)
        nu = tm.unflatten(spec, new_nus)
        new_state = (ScaleByRStdDevWithCountState(count=count_inc, mu=mu, nu=nu)
                     if bias_correction else ScaleByRStdDevState(mu=mu, nu=nu))
        return tm.unflatten(spec, scaled), new_state

    return _with_extra_args(init_fn, update_fn)


class ScaleByAdamState(NamedTuple):
    """The state of Adam: the step count and the first and second moments."""

    count: torch.Tensor  # 0-d int32
    mu: base.Updates
    nu: base.Updates


def scale_by_adam(
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    mu_dtype: Optional[torch.dtype] = None,
    *,
    nesterov: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by Adam's bias-corrected moments: ``m_hat / (sqrt(v_hat + eps_root) + eps)``.

    Runs on the Adam engine (:mod:`optax_compat._runtime.adam_engine`), which picks the
    multi-tensor path with the fewest passes when nothing is differentiated.

    Args:
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root (keeps gradients through the update finite).
      mu_dtype: dtype of the first moment (``None``: that of the params).
      nesterov: use Nesterov's look-ahead first moment (NAdam).

    Returns:
      A transformation with a :class:`ScaleByAdamState`; ``update`` accepts ``inplace``.

    References:
      Kingma et al, `Adam: A Method for Stochastic Optimization
      <https://arxiv.org/abs/1412.6980>`_, 2014.

      Dozat, `Incorporating Nesterov Momentum into Adam
      <https://openreview.net/pdf?id=OM0jvwB8jIp57ZJjtNEZ>`_, 2016.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_adam()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1.0000, -1.0000])
    """
    return adam_engine.scale_by_adam(adam_engine.AdamHyperParams(
        b1=b1, b2=b2, eps=eps, eps_root=eps_root, nesterov=nesterov,
        mu_dtype=bb.canonical_dtype(mu_dtype)), ScaleByAdamState)


class ScaleByAmsgradState(NamedTuple):
    """The state of AMSGrad: Adam's plus the running maximum of the second moment."""

    count: torch.Tensor  # 0-d int32
    mu: base.Updates
    nu: base.Updates
    nu_max: base.Updates


def scale_by_amsgrad(
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    mu_dtype: Optional[torch.dtype] = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by AMSGrad: Adam with the running maximum of the second moment.

    Args:
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment (``None``: that of the params).
      bias_correction_mu: bias-correct the first moment (False: as in the paper).
      bias_correction_nu: bias-correct the second moment before the maximum.

    Returns:
      A transformation with a :class:`ScaleByAmsgradState`; ``update`` accepts ``inplace``.

    References:
      Reddi et al, `On the Convergence of Adam and Beyond
      <https://openreview.net/forum?id=ryQu7f-RZ>`_, 2018.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_amsgrad()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1.0000, -1.0000])
    """
    mu_dtype = bb.canonical_dtype(mu_dtype)

    def init_fn(params):
        return ScaleByAmsgradState(count=bb.zero_count(params), mu=bb.zeros(params, mu_dtype),
                                   nu=bb.zeros(params), nu_max=bb.zeros(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        maxima = bb.state_leaves(state.nu_max, spec, updates, "state.nu_max")
        count_inc = numerics.safe_increment(state.count)
        # In the widest dtypes of the new moments, which promote ``gs`` with ``mus``, ``nus``.
        mu_correction = bb.bias_correction(b1, count_inc, gs + mus)
        nu_correction = bb.bias_correction(b2, count_inc, gs + nus)

        def formula(gs: Leaves, mus: Leaves, nus: Leaves, maxima: Leaves,
                    inplace: bool) -> tuple[Leaves, Leaves, Leaves, Leaves]:
            del inplace
            moments = bb.moving_average(mus, gs, b1)
            seconds = bb.moving_average(nus, tm.abs_sq(gs), b2)
            mu_hats = bb.debias(moments, mu_correction) if bias_correction_mu else moments
            nu_effective = (bb.debias(seconds, nu_correction) if bias_correction_nu
                            else seconds)
            new_maxima = tm.maximum(maxima, nu_effective)
            return (bb.adam_ratio(mu_hats, new_maxima, eps, eps_root),
                    tm.cast(moments, mu_dtype), seconds, new_maxima)

        scaled, new_mus, new_nus, new_maxima = bb.in_blocks(formula, gs, mus, nus, maxima,
                                                            inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByAmsgradState(
            count=count_inc, mu=tm.unflatten(spec, new_mus), nu=tm.unflatten(spec, new_nus),
            nu_max=tm.unflatten(spec, new_maxima))

    return _with_extra_args(init_fn, update_fn)


def scale_by_adamax(b1: Scalar = 0.9, b2: Scalar = 0.999,
                    eps: Scalar = 1e-8) -> base.GradientTransformationExtraArgs:
    """Scales updates by Adamax: the first moment over an infinity-norm second moment.

    Args:
      b1: decay of the first moment.
      b2: decay of the exponentially weighted infinity norm.
      eps: added to the magnitude of the updates.

    Returns:
      A transformation with a :class:`ScaleByAdamState`; ``update`` accepts ``inplace``.

    References:
      Kingma et al, `Adam: A Method for Stochastic Optimization
      <https://arxiv.org/abs/1412.6980>`_, 2014.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_adamax()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1.0000, -1.0000])
    """

    def init_fn(params):
        return ScaleByAdamState(count=bb.zero_count(params), mu=bb.zeros(params),
                                nu=bb.zeros(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        count_inc = numerics.safe_increment(state.count)
        # In the widest dtype of the new moments, which promote ``mus`` and ``gs``.
        correction = bb.bias_correction(b1, count_inc, gs + mus)

        def formula(gs: Leaves, mus: Leaves, nus: Leaves,
                    inplace: bool) -> tuple[Leaves, Leaves, Leaves]:
            del inplace
            moments = bb.moving_average(mus, gs, b1)
            maxima = tm.maximum(tm.add(tm.abs(gs), eps), tm.mul(nus, b2))
            return tm.div(bb.debias(moments, correction), maxima), moments, maxima

        scaled, new_mus, new_nus = bb.in_blocks(formula, gs, mus, nus, inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByAdamState(
            count=count_inc, mu=tm.unflatten(spec, new_mus), nu=tm.unflatten(spec, new_nus))

    return _with_extra_args(init_fn, update_fn)


class ScaleByLionState(NamedTuple):
    """The state of Lion: the step count and the momentum."""

    count: torch.Tensor  # 0-d int32
    mu: base.Updates


_LION_MODES = ("hard", "smooth", "refined")


def scale_by_lion(
    b1: Scalar = 0.9,
    b2: Scalar = 0.99,
    mu_dtype: Optional[torch.dtype] = None,
    *,
    mode: Literal["hard", "smooth", "refined"] = "hard",
    smooth_beta: float = 1.0,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by Lion: the sign of an interpolation of gradient and momentum.

    Args:
      b1: weight of the momentum in the interpolation.
      b2: decay of the momentum.
      mu_dtype: dtype of the momentum (``None``: that of the params).
      mode: ``'hard'`` (sign), ``'smooth'`` (``tanh(smooth_beta * x)``) or ``'refined'``
        (linear in ``[-1, 1]``, the sign outside).
      smooth_beta: sharpness of the ``'smooth'`` mode.

    Returns:
      A transformation with a :class:`ScaleByLionState`; ``update`` accepts ``inplace``.

    Raises:
      ValueError: for an unknown ``mode``.

    References:
      Chen et al, `Symbolic Discovery of Optimization Algorithms
      <https://arxiv.org/abs/2302.06675>`_, 2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_lion()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1., -1.])
    """
    mu_dtype = bb.canonical_dtype(mu_dtype)
    if mode not in _LION_MODES:
        raise ValueError(f"Unknown lion mode: {mode!r}. It needs to be one of {_LION_MODES}.")

    def direction(xs: Leaves, inplace: bool) -> Leaves:
        if mode == "hard":
            return _sign(xs, inplace)
        if mode == "smooth":
            return list(tm.foreach("tanh", tm.mul(xs, smooth_beta)))
        return [torch.where(x.abs() >= 1.0, x.sign(), x) for x in xs]  # NaN stays NaN

    def formula(gs: Leaves, mus: Leaves, inplace: bool) -> tuple[Leaves, Leaves]:
        fast = (bb.is_number(b1) and bb.is_number(b2) and tm.same_dtypes(mus, gs)
                and not tm.is_recording(mus, gs))
        # ``mixed`` is a fresh buffer that the sign may then overwrite when nothing is
        # differentiated.
        scaled = direction(bb.moving_average(mus, gs, b1), inplace=fast)
        if fast:
            return scaled, bb.moving_average(mus, gs, b2, inplace=inplace, convention="torch")
        return scaled, tm.cast(bb.moving_average(mus, gs, b2), mu_dtype)

    def init_fn(params):
        return ScaleByLionState(count=bb.zero_count(params), mu=bb.zeros(params, mu_dtype))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        scaled, new_mus = bb.in_blocks(formula, gs, mus, inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByLionState(
            count=numerics.safe_increment(state.count), mu=tm.unflatten(spec, new_mus))

    return _with_extra_args(init_fn, update_fn)


class ScaleByBeliefState(NamedTuple):
    """The state of AdaBelief: the step count, the first moment and the belief variance."""

    count: torch.Tensor  # 0-d int32
    mu: base.Updates
    nu: base.Updates


def scale_by_belief(
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-16,
    eps_root: Scalar = 1e-16,
    *,
    nesterov: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by AdaBelief: the first moment over the variance of its prediction error.

    Args:
      b1: decay of the first moment.
      b2: decay of the second moment of the prediction error.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment (must be non-zero to differentiate through).
      nesterov: use Nesterov's look-ahead first moment.

    Returns:
      A transformation with a :class:`ScaleByBeliefState`; ``update`` accepts ``inplace``.

    References:
      Zhuang et al, `AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed
      Gradients <https://arxiv.org/abs/2010.07468>`_, 2020.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_belief()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1.1111, -1.1111])
    """

    def init_fn(params):
        return ScaleByBeliefState(count=bb.zero_count(params), mu=bb.zeros(params),
                                  nu=bb.zeros(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        count_inc = numerics.safe_increment(state.count)
        # In the widest dtype of the new second moments, which promote all three.
        nu_correction = bb.bias_correction(b2, count_inc, gs + mus + nus)

        def formula(gs: Leaves, mus: Leaves, nus: Leaves,
                    inplace: bool) -> tuple[Leaves, Leaves, Leaves]:
            del inplace
            moments = bb.moving_average(mus, gs, b1)
            errors = tm.sub(gs, moments)
            seconds = tm.add(bb.moving_average(nus, tm.abs_sq(errors), b2), eps_root)
            mu_hats = bb.first_moment(moments, gs, b1, count_inc, nesterov)
            scaled = bb.adam_ratio(mu_hats, bb.debias(seconds, nu_correction), eps, 0.0)
            return scaled, moments, seconds

        scaled, new_mus, new_nus = bb.in_blocks(formula, gs, mus, nus, inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByBeliefState(
            count=count_inc, mu=tm.unflatten(spec, new_mus), nu=tm.unflatten(spec, new_nus))

    return _with_extra_args(init_fn, update_fn)


def scale_by_yogi(
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-3,
    eps_root: Scalar = 0.0,
    initial_accumulator_value: Scalar = 1e-6,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by Yogi: Adam whose second moment moves additively, by the sign of the gap.

    Args:
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      initial_accumulator_value: starting value of both moments (positive).

    Returns:
      A transformation with a :class:`ScaleByAdamState`; ``update`` accepts ``inplace``.

    References:
      Zaheer et al, `Adaptive Methods for Nonconvex Optimization
      <https://papers.nips.cc/paper/8186-adaptive-methods-for-nonconvex-optimization.pdf>`_,
      2018.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_yogi()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.9960, -0.9985])
    """

    def init_fn(params):
        return ScaleByAdamState(count=bb.zero_count(params),
                                mu=bb.full(params, initial_accumulator_value),
                                nu=bb.full(params, initial_accumulator_value))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        count_inc = numerics.safe_increment(state.count)
        # In the widest dtypes of the new moments, which promote ``gs`` with ``mus``, ``nus``.
        mu_correction = bb.bias_correction(b1, count_inc, gs + mus)
        nu_correction = bb.bias_correction(b2, count_inc, gs + nus)

        def formula(gs: Leaves, mus: Leaves, nus: Leaves,
                    inplace: bool) -> tuple[Leaves, Leaves, Leaves]:
            del inplace
            moments = bb.moving_average(mus, gs, b1)
            squares = tm.abs_sq(gs)
            steps = tm.mul(_sign(tm.sub(nus, squares)), 1 - b2)
            seconds = tm.sub(nus, tm.mul(steps, squares))
            scaled = bb.adam_ratio(bb.debias(moments, mu_correction),
                                   bb.debias(seconds, nu_correction), eps, eps_root)
            return scaled, moments, seconds

        scaled, moments, seconds = bb.in_blocks(formula, gs, mus, nus, inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByAdamState(
            count=count_inc, mu=tm.unflatten(spec, moments), nu=tm.unflatten(spec, seconds))

    return _with_extra_args(init_fn, update_fn)


def scale_by_radam(
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    threshold: Scalar = 5.0,
    *,
    nesterov: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by Rectified Adam: Adam once the variance is tractable, momentum before.

    Args:
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      threshold: length of the approximated SMA above which the adaptive step is used.
      nesterov: use Nesterov's look-ahead first moment.

    Returns:
      A transformation with a :class:`ScaleByAdamState`; ``update`` accepts ``inplace``.

    References:
      Liu et al, `On the Variance of the Adaptive Learning Rate and Beyond
      <https://arxiv.org/abs/1908.03265>`_, 2020.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_radam()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.5000, -1.0000])
    """
    ro_inf = 2.0 / (1.0 - b2) - 1.0

    def init_fn(params):
        return ScaleByAdamState(count=bb.zero_count(params), mu=bb.zeros(params),
                                nu=bb.zeros(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        count_inc = numerics.safe_increment(state.count)
        steps = count_inc.to(tm.widest_real_dtype(gs))
        b2t = b2 ** steps
        ro = ro_inf - 2 * steps * b2t / (1 - b2t)
        rectifier = torch.sqrt((ro - 4.0) * (ro - 2.0) * ro_inf
                               / ((ro_inf - 4.0) * (ro_inf - 2.0) * ro))
        # In the widest dtype of the new second moments, which promote ``nus`` and ``gs``.
        nu_correction = bb.bias_correction(b2, count_inc, gs + nus)

        def formula(gs: Leaves, mus: Leaves, nus: Leaves,
                    inplace: bool) -> tuple[Leaves, Leaves, Leaves]:
            del inplace
            moments = bb.moving_average(mus, gs, b1)
            seconds = bb.moving_average(nus, tm.abs_sq(gs), b2)
            mu_hats = bb.first_moment(moments, gs, b1, count_inc, nesterov)
            adaptive = bb.adam_ratio(tm.mul(mu_hats, tm.scalar_like(rectifier, mu_hats)),
                                     bb.debias(seconds, nu_correction), eps, eps_root)
            return tm.where(ro >= threshold, adaptive, mu_hats), moments, seconds

        scaled, new_mus, new_nus = bb.in_blocks(formula, gs, mus, nus, inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByAdamState(
            count=count_inc, mu=tm.unflatten(spec, new_mus), nu=tm.unflatten(spec, new_nus))

    return _with_extra_args(init_fn, update_fn)


class ScaleByAdaDeltaState(NamedTuple):
    """The state of Adadelta: moving averages of squared gradients and squared updates."""

    e_g: base.Updates
    e_x: base.Updates


def scale_by_adadelta(rho: Scalar = 0.9,
                      eps: Scalar = 1e-6) -> base.GradientTransformationExtraArgs:
    """Scales updates by Adadelta: the ratio of the RMS of past updates to that of gradients.

    Args:
      rho: decay of both moving averages.
      eps: added under both square roots.

    Returns:
      A transformation with a :class:`ScaleByAdaDeltaState`; ``update`` accepts ``inplace``.

    References:
      Zeiler, `ADADELTA: An Adaptive Learning Rate Method
      <https://arxiv.org/abs/1212.5701>`_, 2012.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_adadelta()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.0032, -0.0032])
    """

    def formula(gs: Leaves, e_gs: Leaves, e_xs: Leaves,
                inplace: bool) -> tuple[Leaves, Leaves, Leaves]:
        del inplace
        new_e_gs = bb.moving_average(e_gs, tm.square(gs), rho)
        ratios = tm.div(tm.sqrt(tm.add(e_xs, eps)), tm.sqrt(tm.add(new_e_gs, eps)))
        scaled = tm.mul(ratios, gs)
        return scaled, new_e_gs, bb.moving_average(e_xs, tm.square(scaled), rho)

    def init_fn(params):
        return ScaleByAdaDeltaState(e_g=bb.zeros(params), e_x=bb.zeros(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        e_gs = bb.state_leaves(state.e_g, spec, updates, "state.e_g")
        e_xs = bb.state_leaves(state.e_x, spec, updates, "state.e_x")
        scaled, new_e_gs, new_e_xs = bb.in_blocks(formula, gs, e_gs, e_xs, inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByAdaDeltaState(
            e_g=tm.unflatten(spec, new_e_gs), e_x=tm.unflatten(spec, new_e_xs))

    return _with_extra_args(init_fn, update_fn)


class ScaleByNovogradState(NamedTuple):
    """The state of NovoGrad: the step count, the first moment and per-layer second moments."""

    count: torch.Tensor  # 0-d int32
    mu: base.Updates
    nu: base.Updates


def scale_by_novograd(
    b1: Scalar = 0.9,
    b2: Scalar = 0.25,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    weight_decay: Scalar = 0.0,
    mu_dtype: Optional[torch.dtype] = None,
) -> base.GradientTransformationExtraArgs:
    """Computes NovoGrad updates: layer-wise normalised gradients with momentum.

    Args:
      b1: decay of the first moment.
      b2: decay of the per-layer second moment (a scalar per leaf).
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      weight_decay: weight of the params added to the normalised gradient.
      mu_dtype: dtype of the first moment (``None``: that of the params).

    Returns:
      A transformation with a :class:`ScaleByNovogradState`; ``update`` needs ``params`` and
      accepts ``inplace``.

    References:
      Ginsburg et al, `Stochastic Gradient Methods with Layer-wise Adaptive Moments for
      Training of Deep Networks <https://arxiv.org/abs/1905.11286>`_, 2019.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_novograd()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.4472, -0.8944])
    """
    mu_dtype = bb.canonical_dtype(mu_dtype)

    def init_fn(params):
        return ScaleByNovogradState(
            count=bb.zero_count(params), mu=bb.zeros(params, mu_dtype),
            nu=tm.tree_map(lambda p: torch.zeros((), dtype=p.dtype, device=p.device), params))

    @bb.supports_inplace
    @bb.per_leaf("normalises each leaf by its own norm")
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del extra_args
        gs, spec = tm.float_leaves(updates)
        ps = bb.params_leaves(params, spec, updates, "scale_by_novograd")
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        count_inc = numerics.safe_increment(state.count)
        first_step = count_inc == 1
        squared_norms = tm.square(tm.norms(gs))
        first_nus = [s.to(n.dtype) for s, n in zip(squared_norms, nus)]
        new_nus = tm.where(first_step, first_nus, bb.moving_average(nus, squared_norms, b2))
        denominators = tm.add(tm.sqrt(tm.add(new_nus, eps_root)), eps)

        def formula(gs: Leaves, mus: Leaves, ps: Leaves, denominators: Leaves,
                    inplace: bool) -> tuple[Leaves, ...]:
            """The moments, as updates and as state; ``ps`` and the per-leaf ``denominators``
            are read only (returned as they are)."""
            del inplace
            # ``nu`` is a strongly typed 0-d array in JAX: updates narrower than it are promoted.
            gs = [g.to(torch.promote_types(g.dtype, d.dtype)) for g, d in zip(gs, denominators)]
            additions = tm.add(tm.div(gs, denominators), tm.mul(ps, weight_decay))
            moments = tm.cast(tm.where(first_step, additions, tm.add(tm.mul(mus, b1), additions)),
                              mu_dtype)
            return moments, moments, ps, denominators

        # Whole leaves, which the per-leaf denominators scale.
        new_updates, new_mus, _, _ = bb.in_blocks(formula, gs, mus, ps, denominators,
                                                  inplace=inplace, split=False)
        return tm.unflatten(spec, new_updates), ScaleByNovogradState(
            count=count_inc, mu=tm.unflatten(spec, new_mus),
            nu=tm.unflatten(spec, bb.store(nus, new_nus, inplace)))

    return _with_extra_args(init_fn, update_fn)


class ScaleByAdanState(NamedTuple):
    """The state of Adan: moments of gradients, of their differences, of the combined term."""

    m: base.Updates
    v: base.Updates
    n: base.Updates
    g: base.Updates
    t: torch.Tensor  # 0-d int32


def scale_by_adan(
    b1: Scalar = 0.98,
    b2: Scalar = 0.92,
    b3: Scalar = 0.99,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by Adan (Algorithm 1 of the paper): Nesterov-accelerated adaptive moments.

    Args:
      b1: decay of the moving average of gradients.
      b2: decay of the moving average of gradient differences.
      b3: decay of the moving average of the squared combined term.
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.

    Returns:
      A transformation with a :class:`ScaleByAdanState`; ``update`` accepts ``inplace``.

    References:
      Xie et al, `Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing Deep
      Models <https://arxiv.org/abs/2208.06677>`_, 2022.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_adan()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1.0000, -1.0000])
    """

    def init_fn(params):
        return ScaleByAdanState(m=bb.zeros(params), v=bb.zeros(params), n=bb.zeros(params),
                                g=bb.zeros(params), t=bb.zero_count(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        ms = bb.state_leaves(state.m, spec, updates, "state.m")
        vs = bb.state_leaves(state.v, spec, updates, "state.v")
        ns = bb.state_leaves(state.n, spec, updates, "state.n")
        previous = bb.state_leaves(state.g, spec, updates, "state.g")
        t = numerics.safe_increment(state.t)
        # In the widest dtype of each new moment: ``gs`` promoted with ``ms``, ``vs`` (and
        # ``previous``, in the differences), ``ns``.
        m_correction = bb.bias_correction(b1, t, gs + ms)
        v_correction = bb.bias_correction(b2, t, gs + previous + vs)
        n_correction = bb.bias_correction(b3, t, gs + previous + ns)

        def formula(gs: Leaves, ms: Leaves, vs: Leaves, ns: Leaves, previous: Leaves,
                    inplace: bool) -> tuple[Leaves, ...]:
            differences = tm.where(state.t == 0, tm.zeros_like(gs), tm.sub(gs, previous))
            new_ms = bb.moving_average(ms, gs, b1)
            new_vs = bb.moving_average(vs, differences, b2)
            new_ns = bb.moving_average(ns, tm.abs_sq(tm.add_scaled(gs, 1 - b2, differences)),
                                      b3)
            m_hats = bb.debias(new_ms, m_correction)
            n_hats = bb.debias(new_ns, n_correction)
            scaled = bb.adam_ratio(
                tm.add_scaled(m_hats, 1 - b2, bb.debias(new_vs, v_correction)), n_hats, eps,
                eps_root)
            # The gradient is kept for the next difference: in place it is copied into the
            # state's buffer; else a copy is kept, so that later in-place writes into the
            # caller's gradient buffers cannot change the state.
            return scaled, new_ms, new_vs, new_ns, gs if inplace else tm.clone(gs)

        scaled, new_ms, new_vs, new_ns, new_previous = bb.in_blocks(
            formula, gs, ms, vs, ns, previous, inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByAdanState(
            m=tm.unflatten(spec, new_ms), v=tm.unflatten(spec, new_vs),
            n=tm.unflatten(spec, new_ns), g=tm.unflatten(spec, new_previous), t=t)

    return _with_extra_args(init_fn, update_fn)


# ----------------------------------------------------------------------------------------------
# Per-block scalings.


def _scale_by_block_statistic(statistics: Callable[[Leaves], Leaves],
                              name: str) -> base.GradientTransformationExtraArgs:
    """Multiplies each update leaf by its entry of ``statistics(param_leaves)`` (0-d tensors)."""

    @bb.supports_inplace
    @bb.per_leaf("scales each leaf by a statistic of its parameter")
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del extra_args
        gs, spec = tm.float_leaves(updates)
        factors = statistics(bb.params_leaves(params, spec, updates, name))
        return tm.unflatten(spec, tm.mul_(gs, factors) if inplace else tm.mul(gs, factors)), state

    return _with_extra_args(base.init_empty_state, update_fn)


def scale_by_param_block_norm(min_scale: Scalar = 1e-3) -> base.GradientTransformationExtraArgs:
    """Scales each update leaf by the norm of its parameter block (at least ``min_scale``).

    Args:
      min_scale: lower bound of the scaling factor.

    Returns:
      A stateless transformation whose ``update`` needs ``params`` and accepts
      ``inplace``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_param_block_norm()
      >>> params = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([[0.5, -1.0], [2.0, 0.0]])}
      >>> updates, state = tx.update(grads, state, params)
      >>> updates["w"]
      tensor([[ 2.7386, -5.4772],
              [10.9545,  0.0000]])
    """
    # ``numerics.safe_norm`` of every block, batched: the gradient is 0 where clipped.
    return _scale_by_block_statistic(
        lambda ps: tm.map_stacked(lambda n: tm.at_least(n, min_scale), tm.norms(ps)),
        "scale_by_param_block_norm")


def scale_by_param_block_rms(min_scale: Scalar = 1e-3) -> base.GradientTransformationExtraArgs:
    """Scales each update leaf by the root mean square of its parameter block.

    Args:
      min_scale: lower bound of the scaling factor.

    Returns:
      A stateless transformation whose ``update`` needs ``params`` and accepts
      ``inplace``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_param_block_rms()
      >>> params = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([[0.5, -1.0], [2.0, 0.0]])}
      >>> updates, state = tx.update(grads, state, params)
      >>> updates["w"]
      tensor([[ 1.3693, -2.7386],
              [ 5.4772,  0.0000]])
    """
    # ``numerics.safe_root_mean_squares`` of every block, batched.
    return _scale_by_block_statistic(
        lambda ps: tm.map_stacked(lambda r: tm.at_least(r, min_scale),
                                  tm.root_mean_squares(ps)),
        "scale_by_param_block_rms")


def _clipped_norms(xs: Leaves, min_norm: Scalar) -> torch.Tensor:
    """The norm of each leaf, stacked, replaced by ``min_norm`` where not above it."""
    return tm.at_least(torch.stack(tm.norms(xs)), min_norm)


def scale_by_trust_ratio(
    min_norm: Scalar = 0.0,
    trust_coefficient: Scalar = 1.0,
    eps: Scalar = 0.0,
) -> base.GradientTransformationExtraArgs:
    """Scales each update leaf by the trust ratio ``|param| / |update|`` of its block.

    Used by :func:`optax_compat.lars`, :func:`optax_compat.lamb` and
    :func:`optax_compat.fromage`. All norms are computed in one foreach kernel.

    Args:
      min_norm: lower bound of the parameter and update norms.
      trust_coefficient: multiplies the trust ratio.
      eps: added to the update norm in the denominator.

    Returns:
      A stateless transformation whose ``update`` needs ``params`` and accepts
      ``inplace``.

    References:
      You et al, `Large Batch Training of Convolutional Networks
      <https://arxiv.org/abs/1708.03888>`_, 2017.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_trust_ratio()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1., -2.])
    """

    @bb.supports_inplace
    @bb.per_leaf("scales each leaf by its own trust ratio")
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del extra_args
        gs, spec = tm.float_leaves(updates)
        ps = bb.params_leaves(params, spec, updates, "scale_by_trust_ratio")
        if not gs:
            return updates, state
        param_norms = _clipped_norms(ps, min_norm)
        update_norms = _clipped_norms(gs, min_norm)
        ratios = param_norms * trust_coefficient / (update_norms + eps)
        # A block whose params or update vanish is left unscaled rather than frozen.
        ratios = torch.where((param_norms == 0) | (update_norms == 0),
                             torch.ones_like(ratios), ratios)
        factors = [r.to(g.dtype) for r, g in zip(ratios.unbind(), gs)]
        scaled = tm.mul_(gs, factors) if inplace else tm.mul(gs, factors)
        return tm.unflatten(spec, scaled), state

    return _with_extra_args(base.init_empty_state, update_fn)


class ScaleByRpropState(NamedTuple):
    """The state of Rprop: per-element step sizes and the previous updates."""

    step_sizes: base.Updates
    prev_updates: base.Updates


def scale_by_rprop(
    learning_rate: Scalar,
    eta_minus: Scalar = 0.5,
    eta_plus: Scalar = 1.2,
    min_step_size: Scalar = 1e-6,
    max_step_size: Scalar = 50.0,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by Rprop: per-element step sizes adapted to sign agreements.

    Args:
      learning_rate: the initial step size.
      eta_minus: factor applied to the step size when the gradient changes sign.
      eta_plus: factor applied when the gradient keeps its sign.
      min_step_size: lower bound of the step sizes.
      max_step_size: upper bound of the step sizes.

    Returns:
      A transformation with a :class:`ScaleByRpropState`; ``update`` accepts ``inplace``.

    References:
      Riedmiller and Braun, `A Direct Adaptive Method for Faster Backpropagation Learning:
      The RPROP Algorithm <https://ieeexplore.ieee.org/document/298623>`_, 1993.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_rprop(learning_rate=0.1)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([0., 0.])
    """

    def init_fn(params):
        return ScaleByRpropState(step_sizes=bb.full(params, learning_rate),
                                 prev_updates=bb.zeros(params))

    def formula(gs: Leaves, steps: Leaves, previous: Leaves,
                inplace: bool) -> tuple[Leaves, Leaves, Leaves]:
        del inplace
        agreements = tm.mul(gs, previous)
        new_steps = [
            torch.where(a == 0, s, torch.clamp(torch.where(a > 0, s * eta_plus, s * eta_minus),
                                               min_step_size, max_step_size))
            for a, s in zip(agreements, steps)]
        new_previous = [torch.where(a < 0, torch.zeros_like(sign), s * sign)
                        for a, sign, s in zip(agreements, tm.sign(gs), new_steps)]
        # As in Optax 0.2.8, the emitted update is the previous step's, zeroed on a sign flip.
        scaled = [torch.where(a < 0, torch.zeros_like(p), p) for a, p in zip(agreements, previous)]
        return scaled, new_steps, new_previous

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        steps = bb.state_leaves(state.step_sizes, spec, updates, "state.step_sizes")
        previous = bb.state_leaves(state.prev_updates, spec, updates, "state.prev_updates")
        scaled, new_steps, new_previous = bb.in_blocks(formula, gs, steps, previous,
                                                       inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByRpropState(
            step_sizes=tm.unflatten(spec, new_steps),
            prev_updates=tm.unflatten(spec, new_previous))

    return _with_extra_args(init_fn, update_fn)


class ApplyEvery(NamedTuple):
    """The state of :func:`apply_every`: a counter and the accumulated gradients."""

    count: torch.Tensor  # 0-d int32
    grad_acc: base.Updates


def apply_every(k: int = 1) -> base.GradientTransformation:
    """Accumulates gradients and emits their sum every ``k`` steps (zeros in between).

    Other transformations of a chain still update their state at every step; see
    :class:`optax_compat.MultiSteps` for true gradient accumulation.

    Args:
      k: emit the accumulated updates every ``k`` steps.

    Returns:
      A transformation with an :class:`ApplyEvery` state.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.apply_every(k=2)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([0.5, -1.0])}
      >>> updates, state = tx.update(grads, state, params)
      >>> updates["w"]  # first step: accumulated, nothing applied
      tensor([0., -0.])
      >>> updates, state = tx.update(grads, state, params)
      >>> updates["w"]  # second step: the sum of both
      tensor([ 1., -2.])
    """

    def init_fn(params):
        return ApplyEvery(count=bb.zero_count(params), grad_acc=bb.zeros(params))

    def update_fn(updates, state, params=None):
        del params
        gs, spec = tm.float_leaves(updates)
        accumulated = bb.state_leaves(state.grad_acc, spec, updates, "state.grad_acc")
        phase = state.count % k
        keep = tm.scalar_like(phase != 0, accumulated)
        new_accumulated = tm.add(tm.mul(accumulated, keep), gs)
        emit = tm.scalar_like(phase == k - 1, new_accumulated)
        return tm.unflatten(spec, tm.mul(new_accumulated, emit)), ApplyEvery(
            count=numerics.safe_increment(state.count) % k,
            grad_acc=tm.unflatten(spec, new_accumulated))

    return base.GradientTransformation(init_fn, update_fn)


def _subtract_mean(g: torch.Tensor) -> torch.Tensor:
    if g.ndim > 1:
        return g - g.mean(dim=tuple(range(1, g.ndim)), keepdim=True)
    return g


def centralize() -> base.GradientTransformation:
    """Centralizes gradients: subtracts their mean over all but the leading dimension.

    Leaves of rank 0 or 1 are left unchanged.

    Returns:
      A stateless transformation.

    References:
      Yong et al, `Gradient Centralization: A New Optimization Technique for Deep Neural
      Networks <https://arxiv.org/abs/2004.01461>`_, 2020.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.centralize()
      >>> params = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([[0.5, -1.0], [2.0, 0.0]])}
      >>> updates, state = tx.update(grads, state, params)
      >>> updates["w"]
      tensor([[ 0.7500, -0.7500],
              [ 1.0000, -1.0000]])
    """

    @bb.per_leaf("subtracts each leaf's mean over its trailing axes")
    def update_fn(updates, state, params=None):
        del params
        gs, spec = tm.float_leaves(updates)
        return tm.unflatten(spec, [_subtract_mean(g) for g in gs]), state

    return base.GradientTransformation(base.init_empty_state, update_fn)


class ScaleBySM3State(NamedTuple):
    """The state of SM3: per-dimension accumulators and the momentum."""

    mu: base.Updates
    nu: base.Updates


def _reject_complex(params: base.Params, name: str) -> None:
    if any(x.is_complex() for x in tm.leaves(params)):
        raise ValueError(f"{name} does not support complex parameters.")


def _reject_scalars(params: base.Params, name: str) -> None:
    """SM3 keeps one accumulator per dimension, so a 0-d leaf has none (Optax fails later)."""
    xs, spec = tm.flatten(params)
    if any(x.ndim == 0 for x in xs):
        paths = spec.paths()
        path = next(p for p, x in zip(paths, xs) if x.ndim == 0)
        raise ValueError(f"{name} needs params of rank at least 1; the leaf at path "
                         f"{''.join(f'[{k!r}]' for k in path)} is 0-d.")


def _sm3_accumulator(g: torch.Tensor, covers: list[torch.Tensor], b2: Scalar) -> torch.Tensor:
    """``(1 - b2) * g ** 2 + b2 * cover``, the cover being the minimum of the broadcast
    per-dimension accumulators (``1 - b2`` is replaced by 1 when ``b2 == 1``)."""
    new_weight = 1.0 if bb.is_one(b2) else 1 - b2
    return new_weight * g ** 2 + b2 * functools.reduce(torch.minimum, covers)


def _sm3_maxima(accumulator: torch.Tensor) -> list[torch.Tensor]:
    """The maximum of ``accumulator`` over all axes but each one in turn."""
    if accumulator.ndim < 2:
        return [accumulator] * accumulator.ndim
    return [torch.amax(accumulator, dim=[d for d in range(accumulator.ndim) if d != axis])
            for axis in range(accumulator.ndim)]


def scale_by_sm3(b1: Scalar = 0.9, b2: Scalar = 1.0,
                 eps: Scalar = 1e-8) -> base.GradientTransformation:
    """Scales updates by SM3: memory-efficient adaptive rates from per-dimension maxima.

    Args:
      b1: decay of the momentum.
      b2: decay of the squared-gradient accumulators (1: plain sums).
      eps: added under the square root.

    Returns:
      A transformation with a :class:`ScaleBySM3State` (its ``mu`` holds, for each param, a
      list with one accumulator per dimension); ``update`` accepts ``inplace``.

    Raises:
      ValueError: at ``init`` for complex or 0-d params.

    References:
      Anil et al, `Memory-Efficient Adaptive Optimization
      <https://arxiv.org/abs/1901.11150>`_, 2019.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_sm3()
      >>> params = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([[0.5, -1.0], [2.0, 0.0]])}
      >>> updates, state = tx.update(grads, state, params)
      >>> updates["w"]
      tensor([[ 0.1000, -0.1000],
              [ 0.1000,  0.0000]])
    """

    def init_fn(params):
        _reject_complex(params, "scale_by_sm3")
        _reject_scalars(params, "scale_by_sm3")
        mu = tm.tree_map(lambda p: [p.new_zeros(p.shape[axis]) for axis in range(p.ndim)],
                         params)
        return ScaleBySM3State(mu=mu, nu=bb.zeros(params))

    def step(gs: Leaves, mu_lists: list, nus: Leaves) -> tuple[Leaves, list]:
        """The new momenta, and the new per-axis accumulators of each leaf."""
        accumulators = []
        for g, covers in zip(gs, mu_lists):
            broadcast = [c.reshape([1] * axis + [g.shape[axis]] + [1] * (g.ndim - axis - 1))
                         for axis, c in enumerate(covers)]
            accumulators.append(_sm3_accumulator(g, broadcast, b2))
        scaled = tm.mul(gs, _where_positive_rsqrt(accumulators, eps))
        return bb.moving_average(nus, scaled, b1), [_sm3_maxima(a) for a in accumulators]

    @bb.supports_inplace
    @bb.per_leaf("keeps one accumulator per axis of each leaf")
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        # ``state.mu`` holds a list of accumulators where ``updates`` hold a leaf.
        mu_lists = spec.flatten_up_to(state.mu)
        if inplace and not tm.is_recording(gs, nus):
            # Block by block of whole leaves, each written before the next is read: the
            # temporaries (the accumulators, the scaled gradients) span one block, not the
            # parameters, and small leaves share each foreach call.
            new_updates, new_mu = [], []
            for g_block, covers_block, nu_block in tm.blocks(gs, mu_lists, nus, split=False):
                new_nus, maxima = step(g_block, covers_block, nu_block)
                bb.store(nu_block, new_nus, inplace=True)
                new_updates += bb.emit(g_block, new_nus, inplace=True)
                new_mu += [bb.store(covers, new, inplace=True)
                           for covers, new in zip(covers_block, maxima, strict=True)]
        else:  # the updates are the new momenta (the same tensors, unless in place)
            new_nus, new_mu = step(gs, mu_lists, nus)
            new_updates = bb.emit(gs, new_nus, inplace)
            nus = bb.store(nus, new_nus, inplace)
            new_mu = [bb.store(old, new, inplace) for old, new in zip(mu_lists, new_mu)]
        return tm.unflatten(spec, new_updates), ScaleBySM3State(mu=tm.unflatten(spec, new_mu),
                                                                nu=tm.unflatten(spec, nus))

    return _with_extra_args(init_fn, update_fn)


class ScaleByOptimisticGradientState(NamedTuple):
    """The state of :func:`scale_by_optimistic_gradient`."""

    is_initial_step: torch.Tensor  # 0-d bool
    previous_gradient: base.Updates


def scale_by_optimistic_gradient(alpha: Scalar = 1.0,
                                 beta: Scalar = 1.0) -> base.GradientTransformationExtraArgs:
    """Computes generalized optimistic gradients: ``(alpha + beta) * g_t - beta * g_{t-1}``.

    At the first step the previous gradient is the current one.

    Args:
      alpha: coefficient of generalized optimistic gradient descent.
      beta: coefficient of the negative momentum.

    Returns:
      A transformation with a :class:`ScaleByOptimisticGradientState`; ``update`` accepts
      ``inplace``.

    References:
      Mokhtari et al, `A Unified Analysis of Extra-gradient and Optimistic Gradient Methods
      for Saddle Point Problems <https://arxiv.org/abs/1901.08511>`_, 2019.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_optimistic_gradient()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.5000, -1.0000])
    """

    def init_fn(params):
        return ScaleByOptimisticGradientState(
            is_initial_step=torch.ones((), dtype=torch.bool, device=bb.device_of(params)),
            previous_gradient=bb.zeros(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates, state, params=None, *, inplace: bool = False, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        previous = bb.state_leaves(state.previous_gradient, spec, updates,
                                 "state.previous_gradient")

        def formula(gs: Leaves, previous: Leaves, inplace: bool) -> tuple[Leaves, Leaves]:
            previous = tm.where(state.is_initial_step, gs, previous)
            scaled = tm.sub(tm.mul(gs, alpha + beta), tm.mul(previous, beta))
            # In place the gradient is copied into the state's buffer; else a copy is kept, so
            # that later in-place writes into the caller's gradient cannot change the state.
            return scaled, gs if inplace else tm.clone(gs)

        scaled, new_previous = bb.in_blocks(formula, gs, previous, inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByOptimisticGradientState(
            is_initial_step=torch.zeros_like(state.is_initial_step),
            previous_gradient=tm.unflatten(spec, new_previous))

    return _with_extra_args(init_fn, update_fn)


class ScaleByDistanceOverGradientsState(NamedTuple):
    """The state of :func:`scale_by_distance_over_gradients`."""

    max_dist: base.OptState
    grad_sum_of_squares: base.OptState
    init_params: base.OptState


def scale_by_distance_over_gradients(
    reps_rel: Scalar = 1e-6,
    eps: Scalar = 1e-8,
    param_dtype: torch.dtype = torch.float32,
    global_scale: Scalar = 1.0,
) -> base.GradientTransformation:
    """Distance-over-gradients (layer-wise DoG): a learning-rate-free step size per leaf.

    The step of each leaf is its largest distance from the initial params divided by the root
    of its summed squared gradient norms.

    Args:
      reps_rel: relative size of the initial distance (1e-4 with batch norm, 1e-6 otherwise).
      eps: added under the square root.
      param_dtype: dtype of the stored copy of the initial params.
      global_scale: multiplies the step (typically 1 or -1).

    Returns:
      A transformation with a :class:`ScaleByDistanceOverGradientsState`; ``update`` needs
      ``params``.

    References:
      Ivgi et al, `DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule
      <https://arxiv.org/abs/2302.12022>`_, 2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_distance_over_gradients()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1.4472e-06, -2.8944e-06])
    """
    param_dtype = bb.canonical_dtype(param_dtype)

    def init_fn(params):
        xs, spec = tm.flatten(params)
        max_dist = tm.mul(tm.add(tm.norms(xs), 1), reps_rel)
        # ``jnp.zeros(1)``: JAX's default float, i.e. at least float32.
        sums = [torch.zeros(1, dtype=torch.promote_types(torch.float32, x.dtype),
                            device=x.device) for x in xs]
        return ScaleByDistanceOverGradientsState(
            max_dist=tm.unflatten(spec, max_dist), grad_sum_of_squares=tm.unflatten(spec, sums),
            init_params=tm.unflatten(spec, [x.to(param_dtype, copy=True) for x in xs]))

    def update_fn(updates, state, params=None):
        gs, spec = tm.float_leaves(updates)
        ps = bb.params_leaves(params, spec, updates, "scale_by_distance_over_gradients")
        distances = bb.state_leaves(state.max_dist, spec, updates, "state.max_dist")
        sums = bb.state_leaves(state.grad_sum_of_squares, spec, updates,
                             "state.grad_sum_of_squares")
        initial = bb.state_leaves(state.init_params, spec, updates, "state.init_params")
        new_distances = tm.maximum(distances, tm.norms(tm.sub(ps, initial)))
        new_sums = tm.add(sums, tm.square(tm.norms(gs)))
        steps = tm.mul(tm.div(new_distances, tm.sqrt(tm.add(new_sums, eps))), global_scale)
        # A per-leaf product: the (1,)-shaped step broadcasts against the leaf as in Optax.
        scaled = [step * g for step, g in zip(steps, gs)]
        return tm.unflatten(spec, scaled), ScaleByDistanceOverGradientsState(
            max_dist=tm.unflatten(spec, new_distances),
            grad_sum_of_squares=tm.unflatten(spec, new_sums), init_params=state.init_params)

    return base.GradientTransformation(init_fn, update_fn)


_POLYAK_VARIANTS = ("sps", "sps+")


def scale_by_polyak(
    f_min: Scalar = 0.0,
    max_learning_rate: Scalar = 1.0,
    eps: Scalar = 0.0,
    variant: str = "sps",
) -> base.GradientTransformationExtraArgs:
    r"""Scales updates by Polyak's step size ``min((f(x) - f_min) / |g|^2, max_learning_rate)``.

    Args:
      f_min: a lower bound of the objective, :math:`f^\star`.
      max_learning_rate: the largest step size.
      eps: added to the squared gradient norm in the denominator.
      variant: ``'sps'``, or ``'sps+'`` which clips a negative gap ``f(x) - f_min`` to 0.

    Returns:
      A stateless transformation whose ``update`` takes the keyword argument ``value``, the
      objective at the current params.

    Raises:
      ValueError: for an unknown ``variant``.

    References:
      Loizou et al, `Stochastic Polyak Step-size for SGD: An Adaptive Learning Rate for Fast
      Convergence <https://arxiv.org/abs/2002.10542>`_, 2021.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_polyak(max_learning_rate=1.0)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([2.0, -4.0])}
      >>> value = torch.tensor(5.0)  # the loss at params
      >>> updates, state = tx.update(grads, state, params, value=value)
      >>> updates["w"]
      tensor([ 0.5000, -1.0000])
    """
    if variant not in _POLYAK_VARIANTS:
        raise ValueError(f"Invalid argument value for Polyak SGD: variant={variant!r}, "
                         f"expected one of {_POLYAK_VARIANTS}.")

    @bb.global_reduction("divides by the squared global norm of the gradient")
    def update_fn(updates, state, params=None, *, value, **extra_args):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        squared_norm = tm.sum_of_squares(gs)
        gap = bb.as_tensor(value - f_min, squared_norm.dtype, squared_norm.device)
        if variant == "sps+":
            gap = torch.relu(gap)
        denominator = squared_norm + eps
        step = torch.where(
            denominator <= torch.finfo(torch.float64).eps, torch.zeros_like(denominator),
            torch.minimum(gap / denominator, torch.as_tensor(
                max_learning_rate, dtype=denominator.dtype, device=denominator.device)))
        return tm.unflatten(spec, tm.mul(gs, tm.scalar_like(step, gs))), state

    return base.GradientTransformationExtraArgs(base.init_empty_state, update_fn)


def normalize_by_update_norm(scale_factor: Scalar = 1.0,
                             eps: Scalar = 1e-6) -> base.GradientTransformation:
    """Divides updates by their global norm (plus ``eps``) and multiplies by ``scale_factor``.

    Args:
      scale_factor: the norm of the result (up to ``eps``).
      eps: added to the norm in the denominator.

    Returns:
      A stateless transformation.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.normalize_by_update_norm()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.4472, -0.8944])
    """

    @bb.global_reduction("divides by the global norm")
    def update_fn(updates, state, params=None):
        del params
        gs, spec = tm.float_leaves(updates)
        if not gs:
            return updates, state
        norm = (torch.sqrt(tm.sum_of_squares(gs)) + eps) / scale_factor
        return tm.unflatten(spec, tm.div(gs, tm.scalar_like(norm, gs))), state

    return base.GradientTransformation(base.init_empty_state, update_fn)


ScaleState = base.ScaleState
ScaleByTrustRatioState = base.ScaleByTrustRatioState

# L-BFGS preconditioning: ``scale_by_lbfgs`` and the two-loop recursion. The memory of past
# differences is stored as in Optax: each leaf ``x`` has a stacked buffer of shape
# ``(memory_size, *x.shape)`` written as a ring buffer at index ``count % memory_size``, so
# states match Optax's leaf for leaf. Every step is pure tensor code (no host
# synchronisation): the ring index stays a tensor.


class ScaleByLBFGSState(NamedTuple):
    """State of :func:`scale_by_lbfgs`.

    Attributes:
      count: number of updates so far (0-d ``int32``).
      params: the parameters at the last update.
      updates: the incoming updates (gradients) at the last update.
      diff_params_memory: the last ``memory_size`` parameter differences, stacked per leaf.
      diff_updates_memory: the last ``memory_size`` update differences, stacked per leaf.
      weights_memory: the weights ``1 / <diff_updates, diff_params>`` of the rank-one terms.
    """

    count: torch.Tensor
    params: base.Params
    updates: base.Params
    diff_params_memory: base.ArrayTree
    diff_updates_memory: base.ArrayTree
    weights_memory: torch.Tensor


def _vdot(xs: tm.Leaves, ys: tm.Leaves) -> torch.Tensor:
    """``Re sum(conj(x) * y)`` over all leaves, as a 0-d tensor."""
    return tm.vdot(xs, ys).real


def _precondition_by_lbfgs(
    updates: tm.Leaves,
    diff_params_memory: tm.Leaves,
    diff_updates_memory: tm.Leaves,
    weights_memory: torch.Tensor,
    identity_scale: torch.Tensor | float,
    memory_idx: torch.Tensor,
) -> tm.Leaves:
    r"""Multiplies ``updates`` by the L-BFGS approximation of the inverse Hessian.

    Args:
      updates: the leaves to precondition.
      diff_params_memory: stacked parameter differences, one ``(memory_size, *shape)`` tensor
        per leaf.
      diff_updates_memory: stacked update differences, likewise.
      weights_memory: the weights :math:`\rho_i` of the rank-one terms, shape
        ``(memory_size,)``.
      identity_scale: :math:`\gamma`, the scale of the initial (identity) preconditioner.
      memory_idx: the ring-buffer index of the oldest entry (``count % memory_size``).

    Returns:
      The preconditioned leaves.

    References:
      Algorithm 7.4 of Nocedal and Wright, `Numerical Optimization
      <https://doi.org/10.1007/978-0-387-40065-5>`_, 1999.
    """
    memory_size = weights_memory.shape[0]
    # Oldest to newest, read once so that the loops below index with Python ints.
    order = torch.remainder(memory_idx.long() + torch.arange(memory_size, device=memory_idx.device),
                            memory_size)
    rhos = weights_memory.index_select(0, order)
    if not _concatenated(updates):
        diff_params = [buffer.index_select(0, _index_for(buffer, order))
                       for buffer in diff_params_memory]
        diff_updates = [buffer.index_select(0, _index_for(buffer, order))
                        for buffer in diff_updates_memory]
        return _two_loop(list(updates), _rows(diff_params, range(memory_size)),
                         _rows(diff_updates, range(memory_size)), rhos, identity_scale)
    # Many small leaves of one dtype and device are concatenated into one vector (one copy of
    # the memory, which reordering copies anyway), so each inner product and update is one
    # kernel rather than one per leaf.
    (flat,) = _two_loop([tm.ravel(updates)],
                        _rows([_ordered_rows(diff_params_memory, order)], range(memory_size)),
                        _rows([_ordered_rows(diff_updates_memory, order)], range(memory_size)),
                        rhos, identity_scale)
    return tm.unravel(flat, updates)


def _rows(memory: tm.Leaves, slots: Iterable[int]) -> list[tm.Leaves]:
    """For each slot, the leaves of ``memory`` (stacked ``(memory_size, ...)`` tensors) at it:
    views, not copies."""
    return [[buffer[slot] for buffer in memory] for slot in slots]


def _index_for(buffer: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``index`` as the indexing operators of ``buffer`` take it: a DTensor memory (FSDP2
    params) needs the index as a DTensor too, the same on every rank."""
    if not tm.is_distributed([buffer]):
        return index
    from torch.distributed.tensor import DTensor, Replicate

    return DTensor.from_local(index, buffer.device_mesh,
                              [Replicate()] * buffer.device_mesh.ndim)


# Below this many elements per leaf on average, the two-loop recursion concatenates the
# leaves: a thousand small leaves cost a thousand kernels per inner product otherwise (1.5 s
# against 6.1 s per update at 1M parameters in 10,000 leaves). Large leaves run one by one,
# which copies nothing (0.36 s against 0.73 s at 4M in 100 leaves).
CONCATENATE_BELOW = 16384


def _concatenated(leaves: tm.Leaves) -> bool:
    """Whether the two-loop recursion runs on the leaves concatenated into one vector: several
    small leaves (:data:`CONCATENATE_BELOW`) of one dtype and device.

    DTensor shards stay apart: concatenating them would gather every leaf.
    """
    return (len(leaves) > 1 and sum(x.numel() for x in leaves) < CONCATENATE_BELOW * len(leaves)
            and len({(x.dtype, x.device) for x in leaves}) == 1
            and not tm.is_distributed(leaves))


def _ordered_rows(buffers: tm.Leaves, order: torch.Tensor) -> torch.Tensor:
    """The stacked memory of all leaves as one ``(memory_size, total size)`` matrix, its rows
    in ``order``.

    Each leaf's rows are selected straight into their columns: one new matrix, where a
    concatenation then a selection would make two (a fresh 160 MB tensor costs more in page
    faults than its copy). Autograd and ``vmap`` take no ``out=``, and ``torch.compile`` breaks
    its graph at an ``out=`` view: there, the two copies (which Inductor fuses into one).
    """
    matrices = [buffer.reshape(buffer.shape[0], -1) for buffer in buffers]
    if tm.is_recording(matrices) or tm.is_batched(matrices) or torch.compiler.is_compiling():
        return torch.cat(matrices, dim=1).index_select(0, order)
    rows = matrices[0].new_empty(len(order), sum(matrix.shape[1] for matrix in matrices))
    for matrix, columns in zip(matrices, rows.split([m.shape[1] for m in matrices], dim=1),
                               strict=True):
        torch.index_select(matrix, 0, order, out=columns)
    return rows


def _two_loop(vec: tm.Leaves, diff_params: list[tm.Leaves], diff_updates: list[tm.Leaves],
              rhos: torch.Tensor, identity_scale: torch.Tensor | float, *,
              inplace: bool = False) -> tm.Leaves:
    """The two-loop recursion over memories given row by row, oldest to newest.

    With ``inplace``, ``vec`` is overwritten block by block (:func:`tree_math.blocks`) with the
    kernels the pure recursion runs, so that the temporaries span a block.
    """

    def add_scaled(vec: tm.Leaves, scale: torch.Tensor, rows: tm.Leaves) -> tm.Leaves:
        if not inplace:
            return tm.add_scaled(vec, tm.scalar_like(scale, vec), rows)
        for vec_block, rows_block in tm.blocks(vec, rows):
            tm.add_scaled_(vec_block, tm.scalar_like(scale, vec_block), rows_block)
        return vec

    memory_size = rhos.shape[0]
    alphas = [None] * memory_size
    for i in reversed(range(memory_size)):
        alphas[i] = rhos[i] * _vdot(diff_params[i], vec)
        vec = add_scaled(vec, -alphas[i], diff_updates[i])
    scale = tm.scalar_like(identity_scale, vec)
    vec = tm.mul_(vec, scale) if inplace else tm.mul(vec, scale)
    for i in range(memory_size):
        beta = rhos[i] * _vdot(diff_updates[i], vec)
        vec = add_scaled(vec, alphas[i] - beta, diff_params[i])
    return vec


def _check_shapes_kept(updates: Any, us: tm.Leaves, ws: tm.Leaves, prev_ws: tm.Leaves) -> None:
    """Raises ``ValueError`` if a leaf of the updates or params changed shape since ``init``.

    The memory holds one row per leaf shape given at ``init``; Optax fails the same way
    ("Cannot broadcast to shape with fewer dimensions") when, say, a 0-d parameter became a
    vector.
    """
    for index, (u, w, prev) in enumerate(zip(us, ws, prev_ws, strict=True)):
        if u.shape == w.shape == prev.shape:
            continue
        path = optree.tree_paths(updates, none_is_leaf=tm.NONE_IS_LEAF,
                                 namespace=tm.NAMESPACE)[index]
        where = "".join(f"[{key!r}]" for key in path) or "<root>"
        raise ValueError(
            f"scale_by_lbfgs: the leaf at {where} has shape {tuple(u.shape)} in the updates and "
            f"{tuple(w.shape)} in the params, but {tuple(prev.shape)} at init; L-BFGS keeps its "
            "memory per parameter shape, so shapes cannot change between steps.")


def scale_by_lbfgs(
    memory_size: int = 10,
    scale_init_precond: bool = True,
) -> base.GradientTransformationExtraArgs:
    r"""Scales updates by the L-BFGS approximation of the inverse Hessian.

    The approximation :math:`P_k` is built from the last ``memory_size`` differences of
    parameters :math:`\delta w_j = w_{j+1} - w_j` and of updates (gradients)
    :math:`\delta u_j = u_{j+1} - u_j`:
    :math:`P_{k, j+1} = V_j^\top P_{k, j} V_j + \rho_j \delta w_j \delta w_j^\top` with
    :math:`V_j = I - \rho_j \delta u_j \delta w_j^\top`, :math:`\rho_j = 1 / \langle \delta u_j,
    \delta w_j\rangle` and :math:`P_{k, k-m} = \gamma_k I`, where
    :math:`\gamma_k = \langle \delta w_{k-1}, \delta u_{k-1}\rangle / \|\delta u_{k-1}\|^2` if
    ``scale_init_precond`` else ``1``. The output is :math:`P_k u_k`; chain it with a line
    search (see :func:`lbfgs`). The memory is updated *before* preconditioning, so that a
    line search chained after it sees the preconditioner of the accepted step.

    At the first step :math:`\gamma_0 = \min(1, 1 / \|u_0\|)`, so that the first step stays in
    a ball of radius one (a heuristic of Optax, not from the references).

    Args:
      memory_size: number of past differences kept.
      scale_init_precond: scale the initial identity preconditioner by :math:`\gamma_k`.

    Returns:
      A :class:`GradientTransformationExtraArgs` with a :class:`ScaleByLBFGSState`; ``update``
      needs ``params`` and accepts ``inplace=True``: the new differences are written into
      their rows of the memory and the result into the incoming updates, and the recursion reads
      the rows where they lie, so that nothing the size of the memory is copied (run eagerly,
      it reads the step count on the host; many small leaves take the pure update's kernels and
      copy its results into the buffers).

    Raises:
      ValueError: if ``memory_size < 1``.

    References:
      Algorithms 7.4 and 7.5 of Nocedal and Wright, `Numerical Optimization
      <https://doi.org/10.1007/978-0-387-40065-5>`_, 1999.

      Liu and Nocedal, `On the limited memory BFGS method for large scale optimization
      <https://doi.org/10.1007/BF01589116>`_, 1989.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_lbfgs()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.4472, -0.8944])
    """
    if memory_size < 1:
        raise ValueError("memory_size must be >= 1")

    def init_fn(params: base.Params) -> ScaleByLBFGSState:
        leaves, spec = tm.flatten(params)
        device = leaves[0].device if leaves else None
        # Stacking keeps a DTensor leaf's sharding (its dimension 0 becomes dimension 1).
        stacked_zeros = tm.unflatten(
            spec, [torch.stack([torch.zeros_like(x)] * memory_size) for x in leaves])
        return ScaleByLBFGSState(
            count=bb.zero_count(params),
            params=tm.unflatten(spec, tm.zeros_like(leaves)),
            updates=tm.unflatten(spec, tm.zeros_like(leaves)),
            diff_params_memory=stacked_zeros,
            diff_updates_memory=tm.tree_map(torch.zeros_like, stacked_zeros),
            weights_memory=torch.zeros(memory_size, dtype=tm.widest_real_dtype(leaves),
                                       device=device))

    @bb.supports_inplace
    def update_fn(updates: base.Updates, state: ScaleByLBFGSState,
                  params: base.Params | None = None, *, inplace: bool = False,
                  **extra_args: Any) -> tuple[base.Updates, ScaleByLBFGSState]:
        del extra_args
        us, spec = tm.float_leaves(updates)
        ws = bb.params_leaves(params, spec, updates, "scale_by_lbfgs")
        prev_ws = tm.leaves_like(state.params, spec, "state.params", reference=updates)
        prev_us = tm.leaves_like(state.updates, spec, "state.updates", reference=updates)
        _check_shapes_kept(updates, us, ws, prev_ws)
        diff_params_memory = tm.leaves_like(state.diff_params_memory, spec,
                                            "state.diff_params_memory", reference=updates)
        diff_updates_memory = tm.leaves_like(state.diff_updates_memory, spec,
                                             "state.diff_updates_memory", reference=updates)
        inplace = (inplace and not torch.compiler.is_compiling() and not tm.is_distributed(us)
                   and not tm.is_recording(us, ws, diff_params_memory, diff_updates_memory))
        if inplace and not _concatenated(us):
            _update_inplace(us, ws, prev_ws, prev_us, diff_params_memory, diff_updates_memory,
                            state)
            return tm.unflatten(spec, us), state._replace(
                count=numerics.safe_increment(state.count))
        old_buffers = [*prev_ws, *prev_us, *diff_params_memory, *diff_updates_memory,
                       state.weights_memory]
        count = state.count
        memory_idx = torch.remainder(count, memory_size)
        prev_memory_idx = torch.remainder(count - 1, memory_size).reshape(1).long()
        started = count > 0

        # 1. Store the newest differences (undefined, hence zero, at the first step).
        diff_params = tm.where(started, tm.sub(ws, prev_ws), tm.zeros_like(ws))
        diff_updates = tm.where(started, tm.sub(us, prev_us), tm.zeros_like(us))
        curvature = _vdot(diff_updates, diff_params)
        weight = torch.where(curvature == 0.0, 0.0, 1.0 / curvature)
        # Written in the memory's dtype, as JAX's scatter casts (float64 gradients reaching
        # a memory initialized from float32 parameters).
        diff_params_memory = [buffer.index_copy(0, _index_for(buffer, prev_memory_idx),
                                                d.unsqueeze(0).to(buffer.dtype))
                              for buffer, d in zip(diff_params_memory, diff_params)]
        diff_updates_memory = [buffer.index_copy(0, _index_for(buffer, prev_memory_idx),
                                                 d.unsqueeze(0).to(buffer.dtype))
                               for buffer, d in zip(diff_updates_memory, diff_updates)]
        # The memory of weights is a plain tensor, the same on every rank.
        weights_memory = state.weights_memory.index_copy(
            0, prev_memory_idx, tm.gathered(weight).reshape(1).to(state.weights_memory.dtype))

        # 2. The scale gamma_k of the initial preconditioner.
        if scale_init_precond:
            sq_norm = tm.sum_of_squares(diff_updates)
            secant_scale = torch.where(sq_norm > 0.0, curvature / sq_norm, 1.0)
            update_norm = torch.sqrt(tm.sum_of_squares([u.detach() for u in us]))
            capped_inv_norm = torch.clamp(1.0 / update_norm, max=1.0)
            identity_scale = torch.where(started, secant_scale, capped_inv_norm)
        else:
            identity_scale = 1.0

        # 3. The two-loop recursion computes P_k u_k.
        precond_updates = _precondition_by_lbfgs(us, diff_params_memory, diff_updates_memory,
                                                 weights_memory, identity_scale, memory_idx)
        if inplace:  # many small leaves, concatenated: the pure update copied into the buffers
            tm.copy_(old_buffers, [*ws, *us, *diff_params_memory, *diff_updates_memory,
                                   weights_memory])
            tm.copy_(us, precond_updates)
            return tm.unflatten(spec, us), state._replace(count=numerics.safe_increment(count))
        # Copies: later in-place edits of the caller's tensors must not change the memory.
        return tm.unflatten(spec, precond_updates), ScaleByLBFGSState(
            count=numerics.safe_increment(count),
            params=tm.unflatten(spec, tm.clone(ws)),
            updates=tm.unflatten(spec, tm.clone(us)),
            diff_params_memory=tm.unflatten(spec, diff_params_memory),
            diff_updates_memory=tm.unflatten(spec, diff_updates_memory),
            weights_memory=weights_memory)

    def _update_inplace(us: tm.Leaves, ws: tm.Leaves, prev_ws: tm.Leaves, prev_us: tm.Leaves,
                        diff_params_memory: tm.Leaves, diff_updates_memory: tm.Leaves,
                        state: ScaleByLBFGSState) -> None:
        """The update written into the state's buffers and ``us``, leaf by leaf, with the
        kernels of the pure update: only the memory's rows are read, none is copied.

        The ring index is read on the host (the rows are then views), which is why this runs
        eagerly only.
        """
        count = int(state.count)
        newest = (count - 1) % memory_size
        # 1. The newest differences, straight into their rows (zero at the first step).
        diff_params = [buffer[newest] for buffer in diff_params_memory]
        diff_updates = [buffer[newest] for buffer in diff_updates_memory]
        for rows, new, old in ((diff_params, ws, prev_ws), (diff_updates, us, prev_us)):
            for rows_block, new_block, old_block in tm.blocks(rows, new, old):
                tm.copy_(rows_block, tm.sub(new_block, old_block) if count
                         else tm.zeros_like(new_block))
        curvature = _vdot(diff_updates, diff_params)
        weight = torch.where(curvature == 0.0, 0.0, 1.0 / curvature)
        state.weights_memory[newest] = weight.to(state.weights_memory.dtype)
        # 2. The scale gamma_k of the initial preconditioner.
        if not scale_init_precond:
            identity_scale = 1.0
        elif count:
            sq_norm = tm.sum_of_squares(diff_updates)
            identity_scale = torch.where(sq_norm > 0.0, curvature / sq_norm, 1.0)
        else:
            identity_scale = torch.clamp(1.0 / torch.sqrt(tm.sum_of_squares(us)), max=1.0)
        tm.copy_(prev_ws, ws)
        tm.copy_(prev_us, us)
        # 3. The two-loop recursion, oldest row first, into ``us``.
        order = [(count + k) % memory_size for k in range(memory_size)]
        rhos = state.weights_memory[order]
        _two_loop(us, _rows(diff_params_memory, order), _rows(diff_updates_memory, order),
                  rhos, identity_scale, inplace=True)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
