"""Learning-rate (and other hyperparameter) schedules (mirrors ``optax/schedules/_schedule.py``).

A schedule maps a step count, a Python int or a 0-d integer tensor (as ``update`` passes it), to
a value on the count's device, computed in the dtypes JAX uses under ``optax_compat.config``'s
64-bit switch: with it off (the default, as JAX) everything is float32; with it on a Python int
count and Python floats give float64 while the int32 count of a state divided by an int stays
float32, as in JAX. A 0-d tensor does not change the dtype of the parameters it later multiplies.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._src import base
from optax_compat.schedules import _join

Count = Union[int, torch.Tensor]
Value = Union[float, torch.Tensor]
_logger = logging.getLogger(__name__)


def _as_float(count: Count) -> torch.Tensor:
    """The count in JAX's default float (what ``jnp.pi * count`` computes in)."""
    return bb.as_tensor(count).to(bb.default_float())


def _as_count(count: Count) -> torch.Tensor:
    """The count for integer arithmetic followed by a division, with JAX's promotion rules.

    An int32 tensor count (as optimizer states hold) stays int32, so that dividing it by an int
    gives float32 as ``jnp`` does in either mode; a Python int or an int64 count divides in JAX's
    default float.
    """
    tensor = bb.as_tensor(count)
    if tensor.dtype in (torch.int8, torch.int16, torch.int32, torch.uint8):
        return tensor
    return tensor.to(bb.default_float()) if not tensor.is_floating_point() else tensor


def constant_schedule(value: Value) -> base.Schedule:
    """A schedule that always returns ``value``.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.constant_schedule(0.1)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [0.1, 0.1, 0.1]
    """
    return lambda count: value


def polynomial_schedule(init_value: Value, end_value: Value, power: Value,
                        transition_steps: int, transition_begin: int = 0) -> base.Schedule:
    """Polynomial decay from ``init_value`` to ``end_value`` over ``transition_steps`` steps.

    ``value = (init - end) * (1 - t / transition_steps) ** power + end`` with ``t`` the count
    minus ``transition_begin``, clipped to ``[0, transition_steps]``.

    Args:
      init_value: value before ``transition_begin``.
      end_value: value after the transition.
      power: exponent of the polynomial.
      transition_steps: length of the transition; non-positive gives a constant schedule.
      transition_begin: steps before the transition starts; negative falls back to 0.

    Returns:
      The schedule.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.polynomial_schedule(init_value=1.0, end_value=0.0, power=2,
      ...                                       transition_steps=10)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [1.0, 0.25, 0.0]
    """
    if transition_steps <= 0:
        _logger.info("polynomial_schedule with transition_steps <= 0 is constant init_value.")
        return lambda count: init_value
    if transition_begin < 0:
        _logger.info("polynomial_schedule with transition_begin < 0 starts at 0.")
        transition_begin = 0

    def schedule(count: Count) -> torch.Tensor:
        steps = torch.clamp(_as_count(count) - transition_begin, 0, transition_steps)
        fraction = 1 - steps / transition_steps
        return (init_value - end_value) * fraction**power + end_value

    return schedule


def linear_schedule(init_value: Value, end_value: Value, transition_steps: int,
                    transition_begin: int = 0) -> base.Schedule:
    """Linear interpolation from ``init_value`` to ``end_value`` (a degree-1 polynomial).

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.linear_schedule(init_value=1.0, end_value=0.0,
      ...                                   transition_steps=10)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [1.0, 0.5, 0.0]
    """
    return polynomial_schedule(init_value=init_value, end_value=end_value, power=1,
                               transition_steps=transition_steps,
                               transition_begin=transition_begin)


def piecewise_constant_schedule(
    init_value: Value, boundaries_and_scales: Optional[dict[int, float]] = None,
) -> base.Schedule:
    """Starts at ``init_value`` and multiplies by ``scale`` once the count reaches each boundary.

    Args:
      init_value: the initial value.
      boundaries_and_scales: ``{boundary_step: scale}``; scales must be non-negative.

    Returns:
      The schedule.

    Raises:
      ValueError: for a negative scale.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.piecewise_constant_schedule(init_value=1.0,
      ...                                              boundaries_and_scales={4: 0.5, 8: 0.1})
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [1.0, 0.5, 0.05]
    """
    if boundaries_and_scales is not None and any(
            scale < 0.0 for scale in boundaries_and_scales.values()):
        raise ValueError("`piecewise_constant_schedule` expects non-negative scale factors")
    steps = sorted((boundaries_and_scales or {}).items())
    if not steps:
        return lambda count: init_value

    def schedule(count: Count) -> torch.Tensor:
        count = _as_float(count)
        value = torch.as_tensor(init_value, dtype=bb.default_float())
        for threshold, scale in steps:
            value = torch.where(count < threshold, value, value * scale)
        return value

    return schedule


def exponential_decay(init_value: Value, transition_steps: int, decay_rate: float,
                      transition_begin: int = 0, staircase: bool = False,
                      end_value: Optional[Value] = None) -> base.Schedule:
    """``init_value * decay_rate ** ((count - transition_begin) / transition_steps)``.

    Args:
      init_value: value up to ``transition_begin``.
      transition_steps: steps per factor of ``decay_rate``; non-positive gives a constant.
      decay_rate: the decay factor; 0 gives a constant schedule.
      transition_begin: steps before decay starts; negative falls back to 0.
      staircase: decay in whole steps of ``transition_steps``.
      end_value: a floor (for decay) or ceiling (for growth) of the value.

    Returns:
      The schedule.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.exponential_decay(init_value=1.0, transition_steps=5,
      ...                                   decay_rate=0.5)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [1.0, 0.5, 0.25]
    """
    if transition_steps <= 0:
        _logger.info("exponential_decay with transition_steps <= 0 is constant init_value.")
        return lambda count: init_value
    if decay_rate == 0:
        _logger.info("exponential_decay with decay_rate == 0 is constant init_value.")
        return lambda count: init_value
    if transition_begin < 0:
        _logger.info("exponential_decay with transition_begin < 0 starts at 0.")
        transition_begin = 0
    bound = None if end_value is None else (torch.maximum if decay_rate < 1.0 else torch.minimum)

    def schedule(count: Count) -> torch.Tensor:
        elapsed = _as_count(count) - transition_begin
        exponent = elapsed / transition_steps
        if staircase:
            exponent = torch.floor(exponent)
        init = torch.as_tensor(init_value, dtype=exponent.dtype)
        value = torch.where(elapsed <= 0, init, init * torch.pow(decay_rate, exponent))
        if bound is not None:
            value = bound(value, torch.as_tensor(end_value, dtype=value.dtype))
        return value

    return schedule


def cosine_decay_schedule(init_value: Value, decay_steps: int, alpha: Value = 0.0,
                          exponent: Value = 1.0) -> base.Schedule:
    """Cosine decay from ``init_value`` to ``alpha * init_value`` over ``decay_steps``.

    References:
      Loshchilov & Hutter, SGDR, 2017, https://arxiv.org/abs/1608.03983

    Args:
      init_value: the initial value.
      decay_steps: length of the decay, positive.
      alpha: the final value as a fraction of ``init_value``.
      exponent: power applied to the cosine factor.

    Returns:
      The schedule.

    Raises:
      ValueError: if ``decay_steps`` is not positive.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.cosine_decay_schedule(init_value=1.0, decay_steps=10)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [1.0, 0.5, 0.0]
    """
    if not decay_steps > 0:
        raise ValueError("The cosine_decay_schedule requires positive decay_steps, got "
                         f"decay_steps={decay_steps}.")

    def schedule(count: Count) -> torch.Tensor:
        count = torch.clamp(_as_float(count), max=decay_steps)
        cosine = 0.5 * (1 + torch.cos(math.pi * count / decay_steps))
        return init_value * ((1 - alpha) * cosine**exponent + alpha)

    return schedule


def _linear_interpolate(start: torch.Tensor, end: torch.Tensor,
                        fraction: torch.Tensor) -> torch.Tensor:
    return (end - start) * fraction + start


def _cosine_interpolate(start: torch.Tensor, end: torch.Tensor,
                        fraction: torch.Tensor) -> torch.Tensor:
    return end + (start - end) / 2.0 * (torch.cos(math.pi * fraction) + 1)


def piecewise_interpolate_schedule(
    interpolate_type: str, init_value: Value,
    boundaries_and_scales: Optional[dict[int, float]] = None,
) -> base.Schedule:
    """Interpolates (linearly or by a half cosine) between values scaled at each boundary.

    Args:
      interpolate_type: ``'linear'`` or ``'cosine'``.
      init_value: the value at step 0.
      boundaries_and_scales: ``{boundary_step: scale}``; the value reached at each boundary is
        the previous one times ``scale``. Scales must be non-negative.

    Returns:
      The schedule.

    Raises:
      ValueError: for an unknown ``interpolate_type`` or a negative scale.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.piecewise_interpolate_schedule("linear", init_value=1.0,
      ...                                                 boundaries_and_scales={0: 1.0, 10: 0.1})
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [1.0, 0.55, 0.1]
    """
    interpolators = {"linear": _linear_interpolate, "cosine": _cosine_interpolate}
    if interpolate_type not in interpolators:
        raise ValueError("`interpolate_type` must be either 'cosine' or 'linear'")
    interpolate = interpolators[interpolate_type]
    pairs = sorted((boundaries_and_scales or {}).items())
    if any(scale < 0.0 for _, scale in pairs):
        raise ValueError("`piecewise_interpolate_schedule` expects non-negative scale factors")
    bounds = [0] + [int(b) for b, _ in pairs]
    scales = [s for _, s in pairs]

    def schedule(count: Count) -> torch.Tensor:
        # JAX's bounds are weakly typed ints: an int32 count keeps int32 and divides in
        # float32, a Python int divides in the default float; the values are default floats,
        # strongly typed (``jnp.stack`` makes an array of them).
        count = count if isinstance(count, torch.Tensor) else bb.as_weak(count)
        fraction_dtype = torch.float64 if count.dtype == torch.int64 else torch.float32
        as_bounds = lambda b: torch.tensor(b, dtype=count.dtype, device=count.device)
        lower, upper = as_bounds(bounds[:-1]), as_bounds(bounds[1:])
        values = torch.cumprod(torch.tensor([init_value, *scales], dtype=bb.default_float(),
                                            device=count.device), dim=0)
        inside = (lower <= count) & (count < upper)
        fraction = ((count - lower).to(fraction_dtype)
                    / torch.clamp(upper - lower, min=1).to(fraction_dtype))
        inner = (inside * interpolate(values[:-1], values[1:], fraction)).sum()
        return bb.as_strong(inner + (bounds[-1] <= count) * values[-1])

    return schedule


def linear_onecycle_schedule(transition_steps: int, peak_value: float, pct_start: float = 0.3,
                             pct_final: float = 0.85, div_factor: float = 25.0,
                             final_div_factor: float = 1e4) -> base.Schedule:
    """The one-cycle policy with linear phases: up to ``peak_value``, down, then annealing.

    References:
      Smith & Topin, Super-Convergence, 2017, https://arxiv.org/abs/1708.07120

    Raises:
      ValueError: if ``transition_steps`` is not positive.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.linear_onecycle_schedule(transition_steps=10,
      ...                                          peak_value=1.0)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [0.04, 0.616, 0.0]
    """
    if transition_steps <= 0:
        raise ValueError("A linear onecycle schedule was set with a non-positive "
                         "`transition_steps`")
    return piecewise_interpolate_schedule("linear", peak_value / div_factor, {
        int(pct_start * transition_steps): div_factor,
        int(pct_final * transition_steps): 1.0 / div_factor,
        transition_steps: 1.0 / final_div_factor,
    })


def cosine_onecycle_schedule(transition_steps: int, peak_value: float, pct_start: float = 0.3,
                             div_factor: float = 25.0,
                             final_div_factor: float = 1e4) -> base.Schedule:
    """The one-cycle policy with cosine phases.

    References:
      Smith & Topin, Super-Convergence, 2017, https://arxiv.org/abs/1708.07120

    Raises:
      ValueError: if ``transition_steps`` is not positive.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.cosine_onecycle_schedule(transition_steps=10,
      ...                                          peak_value=1.0)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [0.04, 0.8117, 0.0]
    """
    if transition_steps <= 0:
        raise ValueError("A cosine onecycle schedule was set with a non-positive "
                         "`transition_steps`")
    return piecewise_interpolate_schedule("cosine", peak_value / div_factor, {
        int(pct_start * transition_steps): div_factor,
        int(transition_steps): 1.0 / (div_factor * final_div_factor),
    })


def warmup_constant_schedule(init_value: Value, peak_value: Value,
                             warmup_steps: int) -> base.Schedule:
    """Linear warm-up from ``init_value`` to ``peak_value``, then constant.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.warmup_constant_schedule(init_value=0.0, peak_value=1.0,
      ...                                           warmup_steps=10)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [0.0, 0.5, 1.0]
    """
    return linear_schedule(init_value=init_value, end_value=peak_value,
                           transition_steps=warmup_steps)


def warmup_cosine_decay_schedule(init_value: Value, peak_value: Value, warmup_steps: int,
                                 decay_steps: int, end_value: Value = 0.0,
                                 exponent: Value = 1.0) -> base.Schedule:
    """Linear warm-up to ``peak_value``, then cosine decay to ``end_value`` at ``decay_steps``.

    ``decay_steps`` counts the warm-up too, as in Optax.

    References:
      Loshchilov & Hutter, SGDR, 2017, https://arxiv.org/abs/1608.03983

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.warmup_cosine_decay_schedule(init_value=0.0, peak_value=1.0,
      ...                                               warmup_steps=5, decay_steps=10)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [0.0, 1.0, 0.0]
    """
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    return _join.join_schedules([
        linear_schedule(init_value=init_value, end_value=peak_value,
                        transition_steps=warmup_steps),
        cosine_decay_schedule(init_value=peak_value, decay_steps=decay_steps - warmup_steps,
                              alpha=alpha, exponent=exponent),
    ], [warmup_steps])


def warmup_exponential_decay_schedule(
    init_value: Value, peak_value: Value, warmup_steps: int, transition_steps: int,
    decay_rate: float, transition_begin: int = 0, staircase: bool = False,
    end_value: Optional[Value] = None,
) -> base.Schedule:
    """Linear warm-up to ``peak_value``, then :func:`exponential_decay` from there.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.warmup_exponential_decay_schedule(init_value=0.0, peak_value=1.0,
      ...                                                    warmup_steps=5, transition_steps=5,
      ...                                                    decay_rate=0.5)
      >>> [round(float(schedule(step)), 4) for step in (0, 5, 10)]
      [0.0, 1.0, 0.5]
    """
    return _join.join_schedules([
        linear_schedule(init_value=init_value, end_value=peak_value,
                        transition_steps=warmup_steps),
        exponential_decay(init_value=peak_value, transition_steps=transition_steps,
                          decay_rate=decay_rate, transition_begin=transition_begin,
                          staircase=staircase, end_value=end_value),
    ], [warmup_steps])


def sgdr_schedule(cosine_kwargs: Iterable[dict[str, Value]]) -> base.Schedule:
    """Warm restarts: a sequence of warm-up cosine decays, one per entry of ``cosine_kwargs``.

    References:
      Loshchilov & Hutter, SGDR, 2017, https://arxiv.org/abs/1608.03983

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.sgdr_schedule([dict(init_value=0.0, peak_value=1.0, warmup_steps=2,
      ...                                          decay_steps=5)] * 2)
      >>> [round(float(schedule(step)), 4) for step in (0, 2, 5, 7)]
      [0.0, 1.0, 0.0, 1.0]
    """
    schedules, boundaries, step = [], [], 0
    for kwargs in cosine_kwargs:
        schedules.append(warmup_cosine_decay_schedule(**kwargs))
        step += kwargs["decay_steps"]
        boundaries.append(step)
    return _join.join_schedules(schedules, boundaries[:-1])
