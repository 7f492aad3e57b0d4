"""inject_hyperparams / inject_stateful_hyperparams against real Optax."""

import optax
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import optax_compat as ox
from optax_compat._runtime import tree_math
from optax_compat.testing import (
    assert_leaves_close,
    compare_with_optax,
    jax_precision,
    make_tree,
    strategies,
    to_jax,
)
from tests.optax_compat.combinator_cases import assert_same_runs, jitted

DTYPES = [torch.float32, torch.float64]


def ours_momentum(learning_rate, momentum=0.9, nesterov=False):
    return ox.chain(ox.trace(momentum, nesterov=nesterov), ox.scale(-learning_rate))


def theirs_momentum(learning_rate, momentum=0.9, nesterov=False):
    return optax.chain(optax.trace(momentum, nesterov=nesterov), optax.scale(-learning_rate))


@pytest.mark.parametrize("dtype", DTYPES)
def test_learning_rate_schedule_matches_optax(dtype):
    ours_state, theirs_state = compare_with_optax(
        ox.inject_hyperparams(ours_momentum)(ox.linear_schedule(0.1, 0.01, 4), nesterov=True),
        lambda: jitted(optax.inject_hyperparams(theirs_momentum)(
            optax.linear_schedule(0.1, 0.01, 4), nesterov=True)),
        dtype, steps=6)
    assert type(ours_state).__name__ == "InjectStatefulHyperparamsState"
    # The linear schedule divides the int32 count: a strong float32 that Optax keeps, even for
    # float64 params.
    assert ours_state.hyperparams["learning_rate"].dtype == torch.float32
    assert str(theirs_state.hyperparams["learning_rate"].dtype) == "float32"
    assert "nesterov" not in ours_state.hyperparams


@pytest.mark.parametrize("dtype", DTYPES)
def test_scheduled_adam_betas_match_optax(dtype):
    def b1_schedule(schedules):
        return schedules.piecewise_interpolate_schedule("linear", 0.5, {3: 1.8})

    compare_with_optax(
        ox.inject_hyperparams(ox.scale_by_adam)(b1=b1_schedule(ox), b2=0.99),
        lambda: jitted(optax.inject_hyperparams(optax.scale_by_adam)(
            b1=b1_schedule(optax), b2=0.99)),
        dtype, steps=5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_hand_edited_learning_rate_between_steps_matches_optax(dtype):
    ours_tx = ox.inject_hyperparams(ours_momentum)(learning_rate=0.1)
    params = make_tree(dtype)
    with jax_precision(dtype):
        theirs_tx = optax.inject_hyperparams(theirs_momentum)(learning_rate=0.1)
        theirs_params = to_jax(params)
        ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(theirs_params)
        for step in range(5):
            if step == 2:
                ours_state.hyperparams["learning_rate"] = 0.025
                theirs_state.hyperparams["learning_rate"] = 0.025
            if step == 4:
                ours_state.hyperparams["momentum"] = torch.tensor(0.5, dtype=dtype)
                theirs_state.hyperparams["momentum"] = 0.5
            grads = make_tree(dtype, seed=step + 1)
            ours_updates, ours_state = ours_tx.update(grads, ours_state, params)
            theirs_updates, theirs_state = theirs_tx.update(to_jax(grads), theirs_state,
                                                            theirs_params)
            assert_leaves_close(ours_updates, theirs_updates, what=f"updates step {step}")
            assert_leaves_close(ours_state, theirs_state, what=f"state step {step}")
    assert float(ours_state.hyperparams["learning_rate"]) == pytest.approx(0.025)


def test_editing_a_scheduled_hyperparameter_has_no_effect():
    tx = ox.inject_hyperparams(ours_momentum)(learning_rate=lambda count: 0.1 / (count + 1))
    params = make_tree()
    state = tx.init(params)
    _, state = tx.update(make_tree(seed=1), state, params)
    state.hyperparams["learning_rate"] = 100.0
    _, state = tx.update(make_tree(seed=2), state, params)
    assert float(state.hyperparams["learning_rate"]) == pytest.approx(0.1 / 2)


def test_static_args_pass_callables_through_unscheduled():
    def ours_factory(learning_rate, direction):
        return ox.scale(direction(learning_rate))

    def theirs_factory(learning_rate, direction):
        return optax.scale(direction(learning_rate))

    ours_state, _ = compare_with_optax(
        ox.inject_hyperparams(ours_factory, static_args="direction")(0.3, lambda x: -x),
        lambda: optax.inject_hyperparams(theirs_factory, static_args=("direction",))(
            0.3, lambda x: -x),
        steps=2)
    assert set(ours_state.hyperparams) == {"learning_rate"}


def test_hyperparam_dtype_overrides_the_params_dtype_and_ints_stay_ints():
    state = ox.inject_hyperparams(ox.apply_every, hyperparam_dtype=torch.float64)(k=3).init(
        make_tree(torch.float32))
    assert not state.hyperparams["k"].is_floating_point()
    state = ox.inject_hyperparams(ours_momentum, hyperparam_dtype=torch.float64)(0.1).init(
        make_tree(torch.float32))
    assert state.hyperparams["learning_rate"].dtype == torch.float64
    assert state.hyperparams["momentum"].dtype == torch.float64


def test_unknown_hyperparameter_raises_type_error_naming_it():
    with pytest.raises(TypeError, match="warmup_steps"):
        ox.inject_hyperparams(ours_momentum)(learning_rate=0.1, warmup_steps=10)


def test_static_args_must_be_parameters_of_the_factory():
    with pytest.raises(ValueError, match="static_args"):
        ox.inject_hyperparams(ours_momentum, static_args=["schedule"])


class _DecayOnBadLoss:
    """A stateful schedule that halves the value whenever the ``loss`` extra arg rises."""

    def init(self):
        return {"value": torch.tensor(0.1), "last_loss": torch.tensor(float("inf"))}

    def update(self, state, loss, **extra_args):
        value = torch.where(loss > state["last_loss"], state["value"] / 2, state["value"])
        return {"value": value, "last_loss": loss}

    def __call__(self, state, **extra_args):
        return state["value"]


def test_stateful_schedule_reads_extra_args_and_the_deprecated_name_warns():
    with pytest.warns(DeprecationWarning, match="inject_hyperparams"):
        factory = ox.inject_stateful_hyperparams(ours_momentum)
    tx = factory(learning_rate=_DecayOnBadLoss())
    params = make_tree()
    state = tx.init(params)
    values = []
    for loss in (3.0, 2.0, 2.5, 1.0):
        _, state = tx.update(make_tree(seed=1), state, params, loss=torch.tensor(loss))
        values.append(float(state.hyperparams["learning_rate"]))
    assert values == pytest.approx([0.1, 0.1, 0.1, 0.05])
    assert isinstance(ox.WrappedSchedule(lambda c: c), ox.schedules.StatefulSchedule)


def test_injected_learning_rate_is_differentiable():
    learning_rate = torch.tensor(0.1, requires_grad=True)
    tx = ox.inject_hyperparams(ours_momentum)(learning_rate=learning_rate)
    params, grads = make_tree(), make_tree(seed=1)
    updates, _ = tx.update(grads, tx.init(params), params)
    total = sum(leaf.sum() for leaf in tree_math.leaves(updates))
    (gradient,) = torch.autograd.grad(total, learning_rate)
    expected = -sum(leaf.sum() for leaf in tree_math.leaves(grads))
    assert torch.allclose(gradient, expected)


@settings(max_examples=20)
@given(strategies.params_and_grads(steps=3), st.floats(1e-3, 1.0), st.floats(0.0, 0.99))
def test_injecting_constants_is_the_plain_factory(params_and_grads, learning_rate, momentum):
    params, grads = params_and_grads
    assert_same_runs(ox.inject_hyperparams(ours_momentum)(learning_rate, momentum),
                     ours_momentum(learning_rate, momentum), params, grads,
                     rtol=1e-6, atol=1e-6)
