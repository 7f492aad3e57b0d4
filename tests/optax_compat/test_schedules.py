"""Every schedule against real Optax at counts 0..200, for Python ints and int32 tensors."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import assert_leaves_close, jax_precision

COUNTS = list(range(0, 201))

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


def _values(schedule, counts, as_tensor):
    """The schedule's values at ``counts``, each in the dtype the schedule returns."""
    return [schedule(torch.tensor(count, dtype=torch.int32) if as_tensor else count)
            for count in counts]


# The suite's float32 tolerance, with a tighter absolute floor for values of order one.
ATOL = {torch.float32: 1e-7}


def _float32_cosine(name, kwargs):
    """Optax evaluates this cosine in float32 even under x64 (an int32 count divided by int
    bounds) and returns it as float64; XLA's and PyTorch's float32 cos differ in the last bit."""
    return name == "cosine_onecycle_schedule" or kwargs.get("interpolate_type") == "cosine"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kwargs", CONFIGS,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_schedule_matches_optax(name, kwargs, dtype):
    # Under x64, Optax still computes some schedules in float32 (an int32 count divided by int
    # bounds, a float32 ``pow``); those values are compared at float32 tolerance.
    with jax_precision(dtype):
        theirs_schedule = getattr(optax, name)(**kwargs)
        # Eager, op by op, like the eager PyTorch side (XLA fusion may round float32 differently).
        theirs = [theirs_schedule(jnp.asarray(c, jnp.int32)) for c in COUNTS]
        theirs_int = [theirs_schedule(c) for c in COUNTS[::10]]
    ours_schedule = getattr(ox, name)(**kwargs)
    assert getattr(ox.schedules, name) is getattr(ox, name)
    rtol = {torch.float64: 2e-7} if _float32_cosine(name, kwargs) else None
    assert_leaves_close(_values(ours_schedule, COUNTS, True), theirs, rtol=rtol, atol=ATOL,
                        what="int32 counts")
    assert_leaves_close(_values(ours_schedule, COUNTS[::10], False), theirs_int, rtol=rtol,
                        atol=ATOL, what="Python int counts")


def test_join_schedules_matches_optax():
    kwargs = lambda lib: dict(schedules=[lib.constant_schedule(1.0),
                                         lib.linear_schedule(1.0, 0.0, 50),
                                         lib.constant_schedule(0.3)], boundaries=[30, 90])
    with jax_precision(torch.float64):
        theirs = optax.join_schedules(**kwargs(optax))
        expected = [theirs(jnp.asarray(c, jnp.int32)) for c in COUNTS]
    ours = ox.join_schedules(**kwargs(ox))
    assert_leaves_close(_values(ours, COUNTS, True), expected, atol=0.0)


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
