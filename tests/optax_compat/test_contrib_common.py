"""The contrib momo, schedule_free, sophia, mechanize, reduce_on_plateau and sam with the rest
of the library: dtypes, inject_hyperparams, MultiSteps (the checks of Optax's
``contrib/_common_test.py`` and ``_schedule_free_test.py``)."""

import functools
import inspect

import pytest
import torch

import optax_compat as ox
import optax_compat.testing
from optax_compat._runtime import tree_math
from optax_compat.contrib import (
    _mechanic,
    _momo,
    _reduce_on_plateau,
    _sam,
    _schedule_free,
    _sophia,
)

# name -> (factory, hyperparameters), as in Optax's common contrib tests.
CASES = {
    "momo": (_momo.momo, {"learning_rate": 0.1}),
    "momo_adam": (_momo.momo_adam, {"learning_rate": 0.1}),
    "schedule_free_sgd": (_schedule_free.schedule_free_sgd,
                          {"learning_rate": 1e-2, "warmup_steps": 5000}),
    "schedule_free_adamw": (_schedule_free.schedule_free_adamw,
                            {"learning_rate": 1e-2, "warmup_steps": 5000}),
    "sophia": (_sophia.sophia, {"learning_rate": 1e-2}),
    "mechanize": (functools.partial(_mechanic.mechanize, ox.sgd(0.1)), {"weight_decay": 0.0}),
    "schedule_free": (functools.partial(_schedule_free.schedule_free, ox.sgd(1e-2)),
                      {"learning_rate": 1e-2}),
    "reduce_on_plateau": (_reduce_on_plateau.reduce_on_plateau, {}),
    "sam": (functools.partial(_sam.sam, ox.sgd(0.1)),
            {"adv_optimizer": ox.chain(_sam.normalize(), ox.sgd(0.1))}),
}


def _objective(params):
    return ox.tree_utils.tree_norm(params, squared=True)


def _update_kwargs(name, params, value_dtype=None):
    if name in ("momo", "momo_adam", "reduce_on_plateau"):
        value = _objective(params)
        return {"value": value.to(value_dtype) if value_dtype else value}
    if name == "sophia":
        return {"obj_fn": _objective}
    return {}


def _tensor_dtypes(tree):
    return [x.dtype for x in tree_math.leaves(tree) if isinstance(x, torch.Tensor)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32,
                                   torch.float64], ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_updates_keep_the_params_dtype_and_the_state_is_dtype_stable(name, dtype):
    factory, hyperparameters = CASES[name]
    tx = factory(**hyperparameters)
    params = torch.tensor([-1.0, 10.0, 1.0], dtype=dtype)
    state = tx.init(params)
    initial_dtypes = _tensor_dtypes(state)
    # The loss comes in another dtype on purpose, as in Optax's test.
    value_dtype = torch.bfloat16 if dtype == torch.float16 else torch.float16
    for _ in range(2):
        updates, state = tx.update(2 * params, state, params,
                                   **_update_kwargs(name, params, value_dtype))
        assert updates.dtype == dtype
        assert _tensor_dtypes(state) == initial_dtypes
        params = ox.apply_updates(params, updates)


@pytest.mark.parametrize("name", [name for name in CASES if name not in (
    "reduce_on_plateau", "sam")])
def test_inject_hyperparams_gives_the_same_step(name):
    factory, hyperparameters = CASES[name]
    static = tuple(arg for arg in ("warmup_steps", "num_betas")
                   if arg in inspect.signature(factory).parameters)
    plain = factory(**hyperparameters)
    injected = ox.inject_hyperparams(factory, static)(**hyperparameters)
    params = [-torch.ones(2, 3), torch.ones(2, 5, 2)]
    grads = [torch.ones(2, 3), -torch.ones(2, 5, 2)]
    kwargs = _update_kwargs(name, params)
    updates, state = plain.update(grads, plain.init(params), params, **kwargs)
    injected_updates, injected_state = injected.update(grads, injected.init(params), params,
                                                       **kwargs)
    optax_compat.testing.assert_trees_all_close(injected_updates, updates, rtol=1e-5)
    optax_compat.testing.assert_trees_all_close(injected_state.inner_state, state, rtol=1e-5,
                                                atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_multi_steps_accumulates_before_the_first_step(name):
    factory, hyperparameters = CASES[name]
    inner = factory(**hyperparameters)
    params = torch.tensor([1.0, 2.0])
    kwargs = _update_kwargs(name, params)
    # MultiSteps forwards extra arguments; sophia's obj_fn is bound as in Optax's test.
    if name == "sophia":
        inner = ox.GradientTransformationExtraArgs(
            inner.init, functools.partial(inner.update, obj_fn=_objective))
        kwargs = {}
    tx = ox.MultiSteps(inner, every_k_schedule=4)
    updates, _ = tx.update(2 * params, tx.init(params), params, **kwargs)
    assert torch.equal(updates, torch.zeros_like(params))


def test_schedule_free_with_a_zero_learning_rate_evaluates_at_the_initial_params():
    tx = _schedule_free.schedule_free(ox.sgd(0.0, momentum=0.0), learning_rate=0.0)
    initial = torch.tensor([1.0, 2.0])
    params, state = initial, tx.init(initial)
    for _ in range(5):
        updates, state = tx.update(2 * params, state, params)
        params = ox.apply_updates(params, updates)
    torch.testing.assert_close(_schedule_free.schedule_free_eval_params(state, params), initial)


@pytest.mark.parametrize("state_dtype", [None, torch.bfloat16, torch.float32])
def test_schedule_free_keeps_scalars_and_honours_state_dtype(state_dtype):
    tx = _schedule_free.schedule_free(ox.sgd(1.0), learning_rate=1.0, state_dtype=state_dtype)
    params = torch.ones((), dtype=torch.float32)
    state = tx.init(params)
    assert state.z.dtype == (state_dtype or torch.float32)
    eval_params = _schedule_free.schedule_free_eval_params(state, params)
    assert eval_params.shape == () and eval_params.dtype == torch.float32
