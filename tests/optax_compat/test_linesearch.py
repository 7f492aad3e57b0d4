"""Backtracking and zoom line searches and value_and_grad_from_state against real Optax."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import optax
import optree
import pytest
import torch

from optax_compat._src import alias, base, linesearch, transform
from optax_compat.testing import assert_leaves_close, assert_same_state_types, jax_precision, to_jax
from optax_compat.transforms import _combining
from tests.optax_compat.linesearch_cases import PROBLEMS, CountingFn, Problem, run_against_optax

F64 = torch.float64


def _problem(build, params) -> Problem:
    import jax.numpy as jnp

    return Problem(build(torch), build(jnp), lambda dtype: torch.tensor(params, dtype=dtype))


# The objectives of Optax's linesearch_test.py, each in both worlds.
SEARCH_PROBLEMS = {
    "polynomial": _problem(lambda lib: lambda x: -x - x ** 3 + x ** 4, 0.3),
    "exponential": _problem(lambda lib: lambda x: lib.exp(-4 * x) + x ** 2, -0.7),
    "sinusoidal": _problem(lambda lib: lambda x: -lib.sin(10 * x), 0.4),
    "himmelblau": _problem(
        lambda lib: lambda x: (x[0] ** 2 + x[1] - 11.0) ** 2 + (x[0] + x[1] ** 2 - 7.0) ** 2,
        [0.5, -1.5]),
    "matyas": _problem(lambda lib: lambda x: 0.26 * (x[0] ** 2 + x[1] ** 2) - 0.48 * x[0] * x[1],
                       [1.5, -0.8]),
    "eggholder": _problem(
        lambda lib: lambda x: -(x[1] + 47) * lib.sin(lib.sqrt(lib.abs(x[0] / 2.0 + x[1] + 47.0)))
        - x[0] * lib.sin(lib.sqrt(lib.abs(x[0] - (x[1] + 47.0)))), [12.0, -30.0]),
    "zakharov": _problem(
        lambda lib: lambda x: (x ** 2).sum() + (0.5 * lib.arange(1, 7, dtype=x.dtype) * x).sum()
        ** 2 + (0.5 * lib.arange(1, 7, dtype=x.dtype) * x).sum() ** 4,
        [0.3, -0.2, 0.5, 0.1, -0.4, 0.2]),
    "rosenbrock16": Problem(PROBLEMS["rosenbrock2"].torch_fn, PROBLEMS["rosenbrock2"].jax_fn,
                            lambda dtype: torch.linspace(-1.0, 1.2, 16, dtype=dtype)),
    "logistic": PROBLEMS["logistic"],
}


def _least_squares(lib):
    def fn(params, x, y):
        return 0.5 * (lib.sum(x * params) - y) ** 2
    return fn


def _least_squares_problem() -> Problem:
    import jax.numpy as jnp

    return Problem(_least_squares(torch), _least_squares(jnp),
                   lambda dtype: torch.tensor([1.0, 2.0, 3.0], dtype=dtype))


def _batch(dtype):
    rng = np.random.default_rng(3)
    batches = [(rng.normal(size=3), rng.normal()) for _ in range(6)]
    return lambda step: {"x": torch.tensor(batches[step][0], dtype=dtype),
                         "y": torch.tensor(batches[step][1], dtype=dtype)}


def _backtracking_after_sgd(module, **kwargs):
    return module.chain(module.sgd(learning_rate=1.0),
                        module.scale_by_backtracking_linesearch(**kwargs))


class _Ours:
    """The optax_compat names used here, under Optax's top-level spelling."""

    chain = staticmethod(_combining.chain)
    sgd = staticmethod(alias.sgd)
    scale_by_backtracking_linesearch = staticmethod(linesearch.scale_by_backtracking_linesearch)
    scale_by_zoom_linesearch = staticmethod(linesearch.scale_by_zoom_linesearch)


# ----------------------------------------------------------------------------------------------
# Backtracking.


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("store_grad", [False, True])
def test_backtracking_after_sgd_on_batches_matches_optax(dtype, store_grad):
    # The first example of Optax's docstring: a fresh batch at each step.
    kwargs = {"max_backtracking_steps": 15, "store_grad": store_grad}
    with jax_precision(dtype):
        theirs = _backtracking_after_sgd(optax, **kwargs)
    run_against_optax(_backtracking_after_sgd(_Ours, **kwargs), theirs, _least_squares_problem(),
                      steps=6, dtype=dtype, data=_batch(dtype), reuse_value_and_grad=False)


@pytest.mark.parametrize("kwargs", [
    {"max_backtracking_steps": 15, "store_grad": True},
    {"max_backtracking_steps": 6, "slope_rtol": 0.3, "decrease_factor": 0.5,
     "increase_factor": math.inf, "max_learning_rate": 40.0, "atol": 1e-4, "rtol": 1e-3},
], ids=["reuse-value-and-grad", "hyperparameters"])
def test_backtracking_on_logistic_regression_matches_optax(kwargs):
    # The second example of Optax's docstring: a deterministic objective whose value and
    # gradient are taken from the state when the line search stores them.
    with jax_precision(F64):
        theirs = _backtracking_after_sgd(optax, **kwargs)
    run_against_optax(_backtracking_after_sgd(_Ours, **kwargs), theirs,
                      SEARCH_PROBLEMS["logistic"], steps=8, dtype=F64)


def _single_search(ours_opt, theirs_opt, problem: Problem, params, updates, learning_rate=None,
                   dtype=F64):
    """One line search from ``params`` along ``updates`` in both worlds, with its printout.

    Call it inside ``jax_precision(dtype)``; Optax's update is built with ``theirs_opt``.
    """
    import jax

    params, updates = torch.as_tensor(params, dtype=dtype), torch.as_tensor(updates, dtype=dtype)
    state = ours_opt.init(params)
    theirs_state = theirs_opt.init(to_jax(params))
    if learning_rate is not None:
        state = state._replace(learning_rate=torch.tensor(learning_rate, dtype=dtype))
        theirs_state = theirs_state._replace(learning_rate=to_jax(state.learning_rate))
    value = problem.torch_fn(params)
    (grad,) = torch.autograd.grad(problem.torch_fn(params.requires_grad_(True)), params)
    params = params.detach()
    printed, theirs_printed = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed):
        ours = ours_opt.update(updates, state, params, value=value.detach(), grad=grad,
                               value_fn=problem.torch_fn)
    with contextlib.redirect_stdout(theirs_printed):
        theirs = theirs_opt.update(to_jax(updates), theirs_state, to_jax(params),
                                   value=to_jax(value), grad=to_jax(grad),
                                   value_fn=problem.jax_fn)
        jax.effects_barrier()
    assert_same_state_types(ours[1], theirs[1])
    assert_leaves_close(ours, theirs, what="single search")
    return ours[1], printed.getvalue(), theirs_printed.getvalue()


def test_backtracking_without_finite_values_makes_no_step():
    problem = _problem(lambda lib: lambda x: lib.log(x), 1.0)
    kwargs = {"max_backtracking_steps": 3, "verbose": True}
    with jax_precision(F64):
        state, printed, theirs_printed = _single_search(
            linesearch.scale_by_backtracking_linesearch(**kwargs),
            optax.scale_by_backtracking_linesearch(**kwargs), problem, 1.0, -10.0)
    assert state.learning_rate == 0.0 and state.info.num_linesearch_steps == 4
    assert math.isinf(state.info.decrease_error)
    for line in ("Backtracking linesearch failed", "Using a stepsize of 0"):
        assert line in printed and line in theirs_printed


# ----------------------------------------------------------------------------------------------
# Zoom.


def _zoom_after_sgd(module, **kwargs):
    return module.chain(module.sgd(learning_rate=1.0),
                        module.scale_by_zoom_linesearch(**kwargs))


@pytest.mark.parametrize("name", sorted(SEARCH_PROBLEMS))
def test_zoom_after_sgd_matches_optax(name):
    # "keep" (the default) starts each search from the previous step size.
    with jax_precision(F64):
        theirs = _zoom_after_sgd(optax, max_linesearch_steps=30)
    run_against_optax(_zoom_after_sgd(_Ours, max_linesearch_steps=30), theirs,
                      SEARCH_PROBLEMS[name], steps=3, dtype=F64, resync=True)


@pytest.mark.parametrize("kwargs", [
    {"max_linesearch_steps": 15, "curv_rtol": math.inf, "approx_dec_rtol": None},
    {"max_linesearch_steps": 10, "max_learning_rate": 0.5, "tol": 1e-6, "increase_factor": 3.0,
     "slope_rtol": 0.2, "curv_rtol": 0.3, "stepsize_precision": 1e-3,
     "initial_guess_strategy": "one"},
], ids=["armijo-only", "hyperparameters"])
def test_zoom_variants_match_optax(kwargs):
    with jax_precision(F64):
        theirs = _zoom_after_sgd(optax, **kwargs)
    run_against_optax(_zoom_after_sgd(_Ours, **kwargs), theirs, SEARCH_PROBLEMS["rosenbrock16"],
                      steps=5, dtype=F64, resync=True)


def _dot(lib):
    return lambda w: lib.sum(w * w)


DOT = _problem(_dot, [0.0, 0.0])
FLAT_AT = -0.2
FLAT_DIRECTION = -(2.0 / FLAT_AT ** 3) * math.exp(-1 / FLAT_AT ** 2)  # minus the derivative


# (case, zoom kwargs, problem, params, updates, dtype, expected step size check, printed flags),
# the cases of Optax's tests (the flat function runs in float32 there).
FAILURE_CASES = [
    ("not-a-descent-direction", {"max_linesearch_steps": 18, "curv_rtol": 0.5}, DOT,
     [60.0, 0.0], [1.0, 0.0], F64, lambda s: s < 1e-5,
     [linesearch.FLAG_NOT_A_DESCENT_DIRECTION, linesearch.FLAG_NO_STEPSIZE_FOUND]),
    ("max-stepsize-too-small", {"max_linesearch_steps": 10, "curv_rtol": 0.5,
                                "max_learning_rate": 10.0}, DOT,
     [-60.0, 0.0], [1.0, 0.0], F64, lambda s: s == 10.0,
     [linesearch.FLAG_INTERVAL_NOT_FOUND, linesearch.FLAG_CURVATURE_COND_NOT_SATISFIED]),
    ("not-enough-iterations", {"max_linesearch_steps": 5, "curv_rtol": 0.5}, DOT,
     [-60.0, 0.0], [1.0, 0.0], F64, lambda s: s == 16.0,
     [linesearch.FLAG_CURVATURE_COND_NOT_SATISFIED]),
    ("flat-function", {"max_linesearch_steps": 30},
     _problem(lambda lib: lambda x: lib.exp(-1 / x ** 2), FLAT_AT), FLAT_AT, FLAT_DIRECTION,
     torch.float32, lambda s: s >= 0.0, [linesearch.FLAG_INTERVAL_TOO_SMALL]),
    ("infinite-values", {"max_linesearch_steps": 30},
     _problem(lambda lib: lambda x: lib.log(x), 1.0), 1.0, -2.0, F64, lambda s: s > 0.0, []),
]


@pytest.mark.parametrize("case,kwargs,problem,params,updates,dtype,check,flags", FAILURE_CASES,
                         ids=[c[0] for c in FAILURE_CASES])
def test_zoom_failure_modes_match_optax(case, kwargs, problem, params, updates, dtype, check,
                                        flags):
    kwargs = {**kwargs, "verbose": True}
    with jax_precision(dtype):
        state, printed, theirs_printed = _single_search(
            linesearch.scale_by_zoom_linesearch(**kwargs),
            optax.scale_by_zoom_linesearch(**kwargs), problem, params, updates,
            learning_rate=1.0, dtype=dtype)
    assert check(state.learning_rate.item())
    for flag in flags:
        assert flag in printed
    all_flags = [getattr(linesearch, name) for name in dir(linesearch)
                 if name.startswith("FLAG_")]
    assert [f in printed for f in all_flags] == [f in theirs_printed for f in all_flags]


def test_high_smaller_than_low_satisfies_both_criteria():
    problem = _problem(lambda lib: lambda x: x ** 2, -1.0)
    with jax_precision(F64):
        state, _, _ = _single_search(
            linesearch.scale_by_zoom_linesearch(max_linesearch_steps=20),
            optax.scale_by_zoom_linesearch(max_linesearch_steps=20), problem, -1.0, 1.95,
            learning_rate=1.0)
    assert state.info.decrease_error <= 0.0 and state.info.curvature_error <= 0.0


def test_zoom_updates_keep_the_graph_of_the_incoming_updates():
    fn = _dot(torch)
    params = torch.tensor([1.0, -2.0], dtype=F64)
    direction = (-2.0 * params).requires_grad_(True)
    tx = linesearch.scale_by_zoom_linesearch(max_linesearch_steps=10)
    updates, state = tx.update(direction, tx.init(params), params, value=fn(params),
                               grad=2.0 * params, value_fn=fn)
    torch.testing.assert_close(updates, -params)  # the exact minimiser along the line
    (grad,) = torch.autograd.grad(updates.sum(), direction)
    torch.testing.assert_close(grad, torch.full_like(grad, state.learning_rate.item()))


# ----------------------------------------------------------------------------------------------
# value_and_grad_from_state.


def test_value_and_grad_from_state_reuses_the_line_search_results():
    fn = CountingFn(_dot(torch))
    value_and_grad = linesearch.value_and_grad_from_state(fn)
    params = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    solver = _backtracking_after_sgd(_Ours, max_backtracking_steps=15, store_grad=True)
    state = solver.init(params)
    value, grad = value_and_grad(params, state=state)  # the stored value is inf: evaluate
    assert fn.calls == 1
    torch.testing.assert_close(value, torch.tensor(14.0, dtype=F64))
    torch.testing.assert_close(grad, 2.0 * params)
    updates, state = solver.update(grad, state, params, value=value, grad=grad, value_fn=fn)
    params = params + updates
    calls = fn.calls
    value, grad = value_and_grad(params, state=state)
    assert fn.calls == calls  # no evaluation: taken from the state
    torch.testing.assert_close(value, fn(params))
    torch.testing.assert_close(grad, 2.0 * params)


def test_value_and_grad_from_state_forwards_arguments():
    value_and_grad = linesearch.value_and_grad_from_state(
        lambda w, scale, *, shift: scale * torch.sum((w - shift) ** 2))
    tx = linesearch.scale_by_zoom_linesearch(max_linesearch_steps=5)
    params = torch.tensor([1.0, 2.0], dtype=F64)
    value, grad = value_and_grad(params, 3.0, state=tx.init(params), shift=1.0)
    torch.testing.assert_close(value, torch.tensor(3.0, dtype=F64))
    torch.testing.assert_close(grad, torch.tensor([0.0, 6.0], dtype=F64))


def test_value_and_grad_from_state_errors_like_optax():
    value_and_grad = linesearch.value_and_grad_from_state(_dot(torch))
    params = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    adam_state = transform.scale_by_adam().init(params)
    with pytest.raises(ValueError, match="Value or gradient not found in the state"):
        value_and_grad(params, state=adam_state)
    without_grad = linesearch.scale_by_backtracking_linesearch(max_backtracking_steps=5)
    with pytest.raises(ValueError, match="Value or gradient not found in the state"):
        value_and_grad(params, state=without_grad.init(params))
    twice = _combining.chain(linesearch.scale_by_zoom_linesearch(max_linesearch_steps=5),
                             linesearch.scale_by_zoom_linesearch(max_linesearch_steps=5))
    with pytest.raises(KeyError, match="multiple values"):
        value_and_grad(params, state=twice.init(params))


# ----------------------------------------------------------------------------------------------
# States and bad usage.


def test_state_types_match_optax():
    params = {"w": torch.zeros(3, dtype=F64), "b": torch.zeros((), dtype=F64)}
    for build in (lambda m: m.scale_by_backtracking_linesearch(max_backtracking_steps=3),
                  lambda m: m.scale_by_backtracking_linesearch(3, store_grad=True),
                  lambda m: m.scale_by_zoom_linesearch(max_linesearch_steps=3)):
        with jax_precision(F64):
            theirs = build(optax).init(to_jax(params))
        ours = build(linesearch).init(params)
        assert_same_state_types(ours, theirs)
        assert_leaves_close(ours, theirs, what="init state")
    assert linesearch.ZoomLinesearchInfo._fields == optax.ZoomLinesearchInfo._fields


@pytest.mark.parametrize("build", [
    lambda: linesearch.scale_by_backtracking_linesearch(max_backtracking_steps=5),
    lambda: linesearch.scale_by_zoom_linesearch(max_linesearch_steps=5),
], ids=["backtracking", "zoom"])
def test_bad_usage_raises_clear_errors(build):
    def value_fn(params, batch):
        return torch.sum(params * batch)

    tx = build()
    params = torch.tensor([1.0, 2.0], dtype=F64)
    updates, grad, batch = -0.1 * torch.ones(2, dtype=F64), torch.ones(2, dtype=F64), params
    state = tx.init(params)
    value = value_fn(params, batch)
    with pytest.raises(TypeError, match="missing: value, grad, value_fn"):
        tx.update(updates, state, params)
    with pytest.raises(TypeError, match="missing: value_fn"):
        tx.update(updates, state, params, value=value, grad=grad)
    with pytest.raises(TypeError, match=r"Unexpected keyword arguments.*\['unused_arg'\]"):
        tx.update(updates, state, params, value=value, grad=grad, value_fn=value_fn,
                  batch=batch, unused_arg=42)
    with pytest.raises(ValueError, match="requires the current value of parameters"):
        tx.update(updates, state, None, value=value, grad=grad, value_fn=value_fn, batch=batch)
    with pytest.raises(ValueError, match="must return a scalar"):
        tx.update(updates, state, params, value=value, grad=grad,
                  value_fn=lambda p, batch: p * batch, batch=batch)
    new_updates, _ = tx.update(updates, state, params, value=value, grad=grad,
                               value_fn=value_fn, batch=batch)
    assert new_updates.shape == updates.shape


def test_unknown_initial_guess_strategy():
    tx = linesearch.scale_by_zoom_linesearch(max_linesearch_steps=5,
                                             initial_guess_strategy="twice")
    params = torch.ones(2, dtype=F64)
    with pytest.raises(ValueError, match="Unknown initial guess strategy: twice"):
        tx.update(-params, tx.init(params), params, value=torch.tensor(2.0, dtype=F64),
                  grad=2 * params, value_fn=_dot(torch))


def test_extract_fns_kwargs():
    def fn1(a, b):
        return a + b

    def fn2(c, d):
        return c + d

    fns_kwargs, remaining = linesearch._extract_fns_kwargs((fn1, fn2),
                                                           {"b": 1.0, "d": 2.0, "e": 3.0})
    assert fns_kwargs == [{"b": 1.0}, {"d": 2.0}]
    assert remaining == {"e": 3.0}


def test_returns_gradient_transformation_extra_args():
    assert isinstance(linesearch.scale_by_zoom_linesearch(3), base.GradientTransformationExtraArgs)
    assert isinstance(linesearch.scale_by_backtracking_linesearch(3),
                      base.GradientTransformationExtraArgs)


FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, F64]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("hyperparameter_dtype", FLOAT_DTYPES)
def test_state_dtypes_are_stable(dtype, hyperparameter_dtype):
    # Optax's test_dtype_stability: tensor hyperparameters and objective values of another
    # dtype do not change the dtypes of the state or of the updates.
    def hyper(names):
        return {k: torch.tensor(1e-5, dtype=hyperparameter_dtype) for k in names}

    backtracking = ["slope_rtol", "decrease_factor", "increase_factor", "max_learning_rate",
                    "atol", "rtol"]
    zoom = ["tol", "increase_factor", "slope_rtol", "curv_rtol", "approx_dec_rtol",
            "stepsize_precision"]
    params = torch.tensor([1.0, 2.0], dtype=dtype)
    for tx in (linesearch.scale_by_backtracking_linesearch(5, **hyper(backtracking)),
               linesearch.scale_by_backtracking_linesearch(5, store_grad=True,
                                                           **hyper(backtracking)),
               linesearch.scale_by_zoom_linesearch(5, **hyper(zoom))):
        state = tx.init(params)
        updates, new_state = tx.update(
            params, state, params, value=1.0, grad=params,
            value_fn=lambda x: torch.sum(x ** 2).to(hyperparameter_dtype))
        assert updates.dtype == dtype
        assert [x.dtype for x in optree.tree_leaves(new_state)] == [
            x.dtype for x in optree.tree_leaves(state)]


def test_successful_searches_print_nothing(capsys):
    fn = _dot(torch)
    params = torch.tensor([1.0, -2.0], dtype=F64)
    for tx in (linesearch.scale_by_backtracking_linesearch(15, verbose=True),
               linesearch.scale_by_zoom_linesearch(15, verbose=True)):
        tx.update(-2.0 * params, tx.init(params), params, value=fn(params), grad=2.0 * params,
                  value_fn=fn)
    assert capsys.readouterr().out == ""
