"""Every schedule against real Optax at counts 0..200, for Python ints and int32 tensors."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import is_weak
from optax_compat.testing import jax_precision

# Every third count to 200, plus both sides of the decay ends used below.
COUNTS = sorted(set(range(0, 201, 3)) | {49, 50, 51, 99, 100, 101, 149, 150, 151, 169, 170, 171,
                                         179, 180, 181})

CONFIGS = [
    ("constant_schedule", dict(value=0.3)),
    ("linear_schedule", dict(init_value=1.0, end_value=0.1, transition_steps=100)),
    ("linear_schedule", dict(init_value=0.1, end_value=1.0, transition_steps=50,
                             transition_begin=25)),
    ("linear_schedule", dict(init_value=0.5, end_value=1.0, transition_steps=0)),
    ("polynomial_schedule", dict(init_value=1.0, end_value=0.01, power=2.0,
                                 transition_steps=120, transition_begin=10)),
    ("polynomial_schedule", dict(init_value=1.0, end_value=0.0, power=0.5,
                                 transition_steps=80, transition_begin=-5)),
    ("cosine_decay_schedule", dict(init_value=0.5, decay_steps=150)),
    ("cosine_decay_schedule", dict(init_value=0.5, decay_steps=99, alpha=0.1, exponent=2.0)),
    ("warmup_cosine_decay_schedule", dict(init_value=0.0, peak_value=1.0, warmup_steps=20,
                                          decay_steps=180, end_value=0.05)),
    ("warmup_cosine_decay_schedule", dict(init_value=0.1, peak_value=0.0, warmup_steps=10,
                                          decay_steps=100)),
    ("exponential_decay", dict(init_value=1.0, transition_steps=20, decay_rate=0.5)),
    ("exponential_decay", dict(init_value=1.0, transition_steps=20, decay_rate=0.5,
                               staircase=True, transition_begin=30)),
    ("exponential_decay", dict(init_value=1.0, transition_steps=10, decay_rate=0.5,
                               end_value=0.2)),
    ("exponential_decay", dict(init_value=0.1, transition_steps=10, decay_rate=1.5,
                               end_value=0.5)),
    ("exponential_decay", dict(init_value=0.1, transition_steps=0, decay_rate=0.5)),
    ("exponential_decay", dict(init_value=0.1, transition_steps=5, decay_rate=0.0)),
    ("piecewise_constant_schedule", dict(init_value=1.0,
                                         boundaries_and_scales={50: 0.5, 100: 0.1, 150: 2.0})),
    ("piecewise_constant_schedule", dict(init_value=0.7)),
    ("piecewise_interpolate_schedule", dict(interpolate_type="linear", init_value=1.0,
                                            boundaries_and_scales={40: 0.5, 120: 0.1})),
    ("piecewise_interpolate_schedule", dict(interpolate_type="cosine", init_value=2.0,
                                            boundaries_and_scales={0: 0.5, 60: 3.0, 61: 0.1})),
    ("piecewise_interpolate_schedule", dict(interpolate_type="linear", init_value=2.0)),
    ("linear_onecycle_schedule", dict(transition_steps=150, peak_value=1.0)),
    ("cosine_onecycle_schedule", dict(transition_steps=170, peak_value=0.5, pct_start=0.2)),
    ("warmup_constant_schedule", dict(init_value=0.0, peak_value=0.3, warmup_steps=30)),
    ("warmup_exponential_decay_schedule", dict(init_value=0.0, peak_value=1.0, warmup_steps=20,
                                               transition_steps=15, decay_rate=0.7,
                                               transition_begin=5, staircase=True,
                                               end_value=0.05)),
    ("sgdr_schedule", dict(cosine_kwargs=[
        dict(init_value=0.0, peak_value=1.0, warmup_steps=5, decay_steps=60),
        dict(init_value=0.1, peak_value=0.5, warmup_steps=10, decay_steps=80, end_value=0.01),
        dict(init_value=0.0, peak_value=0.2, warmup_steps=0, decay_steps=70)])),
]


def _float32_cosine(name, kwargs):
    """Optax's piecewise cosine takes the cosine of a float32 fraction even in 64-bit mode."""
    return name == "cosine_onecycle_schedule" or kwargs.get("interpolate_type") == "cosine"


def _values_and_dtypes(schedule, counts, as_count):
    values = [schedule(as_count(count)) for count in counts]
    dtypes = [str(getattr(v, "dtype", type(v).__name__)).replace("torch.", "") for v in values]
    return np.array([float(v) for v in values]), dtypes


def _weak_types(schedule, counts, as_count):
    """Whether each value is weakly typed: JAX's flag for Optax's, ``is_weak`` for ours."""
    values = [schedule(as_count(count)) for count in counts]
    return [is_weak(v) if isinstance(v, torch.Tensor) else bool(jnp.asarray(v).weak_type)
            for v in values]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["x64_off", "x64_on"])
@pytest.mark.parametrize("name,kwargs", CONFIGS,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_schedule_matches_optax(name, kwargs, dtype):
    """Values and dtypes (and in 64-bit mode weak types) at counts up to and past the decay, in
    JAX's 32-bit and 64-bit modes.

    JAX's mode and ``optax_compat.config``'s switch are set together: float32 values with x64
    off, and with it on float64 from Python ints while an int32 count divided by an int stays
    float32, as in JAX.
    """
    with jax_precision(dtype):
        theirs_schedule = getattr(optax, name)(**kwargs)
        ours_schedule = getattr(ox, name)(**kwargs)
        # Eager, op by op, like the eager PyTorch side (XLA fusion may round float32 differently).
        theirs, theirs_dtypes = _values_and_dtypes(theirs_schedule, COUNTS,
                                                   lambda c: jnp.asarray(c, jnp.int32))
        ours, ours_dtypes = _values_and_dtypes(ours_schedule, COUNTS,
                                               lambda c: torch.tensor(c, dtype=torch.int32))
        theirs_int, theirs_int_dtypes = _values_and_dtypes(theirs_schedule, COUNTS[::10], int)
        ours_int, ours_int_dtypes = _values_and_dtypes(ours_schedule, COUNTS[::10], int)
        if dtype == torch.float64:  # With x64 off every value is float32, weak or not.
            assert (_weak_types(ours_schedule, COUNTS[::10],
                                lambda c: torch.tensor(c, dtype=torch.int32))
                    == _weak_types(theirs_schedule, COUNTS[::10],
                                   lambda c: jnp.asarray(c, jnp.int32)))
    assert getattr(ox.schedules, name) is getattr(ox, name)
    assert (ours_dtypes, ours_int_dtypes) == (theirs_dtypes, theirs_int_dtypes)
    # Tolerances follow the dtype of the values (float32 values stay float32 in 64-bit mode);
    # absolute errors scale with the schedule's largest value (a cosine near its end is the
    # difference of two numbers of that size: XLA's and PyTorch's float32 cos differ by an ulp).
    for mine, reference, dtypes in ((ours, theirs, theirs_dtypes),
                                    (ours_int, theirs_int, theirs_int_dtypes)):
        float32_inside = dtypes[-1] not in ("float64", "float") or _float32_cosine(name, kwargs)
        rtol = 4e-7 if float32_inside else 1e-12
        np.testing.assert_allclose(mine, reference, rtol=rtol,
                                   atol=rtol * np.abs(reference).max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["x64_off", "x64_on"])
@pytest.mark.parametrize("pieces", ["constant-linear-constant", "cosine-linear", "pwc-exp",
                                    "interpolate-linear", "exp-onecycle"])
def test_join_schedules_matches_optax(pieces, dtype):
    """``jnp.where`` promotion: a strong float32 piece wins over a weak float64 one in x64, and
    two strong ones promote (a piecewise interpolation's float64 is strong)."""
    def schedules(lib):
        return {"constant-linear-constant": [lib.constant_schedule(1.0),
                                             lib.linear_schedule(1.0, 0.0, 50),
                                             lib.constant_schedule(0.3)],
                "cosine-linear": [lib.cosine_decay_schedule(1.0, 40),
                                  lib.linear_schedule(0.5, 0.0, 50), lib.constant_schedule(0.3)],
                "pwc-exp": [lib.piecewise_constant_schedule(1.0, {10: 0.5}),
                            lib.exponential_decay(0.5, 10, 0.5),
                            lib.cosine_decay_schedule(0.3, 60)],
                "interpolate-linear": [lib.piecewise_interpolate_schedule("linear", 1.0,
                                                                          {40: 0.5}),
                                       lib.linear_schedule(0.5, 0.0, 50),
                                       lib.constant_schedule(0.3)],
                "exp-onecycle": [lib.exponential_decay(0.5, 10, 0.5),
                                 lib.linear_onecycle_schedule(50, 0.5),
                                 lib.linear_schedule(0.5, 0.0, 50)]}[pieces]
    with jax_precision(dtype):
        theirs = optax.join_schedules(schedules(optax), boundaries=[30, 90])
        ours = ox.join_schedules(schedules(ox), boundaries=[30, 90])
        for as_count, counts in ((lambda c: torch.tensor(c, dtype=torch.int32), COUNTS),
                                 (int, COUNTS[::10])):
            mine, mine_dtypes = _values_and_dtypes(ours, counts, as_count)
            reference, dtypes = _values_and_dtypes(
                theirs, counts, lambda c, f=as_count: jnp.asarray(c, jnp.int32) if f is not int
                else c)
            assert mine_dtypes == dtypes
            rtol = 1e-12 if dtypes[-1] == "float64" else 4e-7
            np.testing.assert_allclose(mine, reference, rtol=rtol, atol=rtol)


def test_schedule_values_are_tensors_on_the_count_device_and_differentiable():
    init = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    value = ox.cosine_decay_schedule(init, 100)(torch.tensor(25, dtype=torch.int32))
    (grad,) = torch.autograd.grad(value, init)
    assert grad.item() == pytest.approx(0.5 * (1 + np.cos(np.pi * 0.25)))


@pytest.mark.parametrize("factory,kwargs,match", [
    ("cosine_decay_schedule", dict(init_value=1.0, decay_steps=0), "positive decay_steps"),
    ("cosine_decay_schedule", dict(init_value=1.0, decay_steps=-3), "positive decay_steps"),
    ("warmup_cosine_decay_schedule", dict(init_value=0.0, peak_value=1.0, warmup_steps=10,
                                          decay_steps=10), "positive decay_steps"),
    ("piecewise_constant_schedule", dict(init_value=1.0, boundaries_and_scales={5: -1.0}),
     "non-negative"),
    ("piecewise_interpolate_schedule", dict(interpolate_type="linear", init_value=1.0,
                                            boundaries_and_scales={5: -1.0}), "non-negative"),
    ("piecewise_interpolate_schedule", dict(interpolate_type="step", init_value=1.0),
     "interpolate_type"),
    ("linear_onecycle_schedule", dict(transition_steps=0, peak_value=1.0), "non-positive"),
    ("cosine_onecycle_schedule", dict(transition_steps=0, peak_value=1.0), "non-positive"),
])
def test_bad_schedules_fail_like_optax(factory, kwargs, match):
    with pytest.raises(ValueError) as theirs:
        getattr(optax, factory)(**kwargs)
    with pytest.raises(ValueError, match=match):
        getattr(ox, factory)(**kwargs)
    assert theirs.type is ValueError


@pytest.mark.parametrize("boundaries,match", [([50, 20], "non-decreasing"),
                                              ([10], "one boundary fewer")])
def test_join_schedules_rejects_bad_boundaries(boundaries, match):
    schedules = [ox.constant_schedule(1.0)] * 3
    with pytest.raises(ValueError, match=match):
        ox.join_schedules(schedules, boundaries)
