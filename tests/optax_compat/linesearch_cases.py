"""Objectives and a side-by-side runner for the line-search and L-BFGS tests.

Each objective exists twice, written the same way in PyTorch and in JAX, so that both
libraries optimise the same function. :func:`run_against_optax` drives a solver that needs
``value``/``grad``/``value_fn`` (a line search, L-BFGS) in both worlds and compares updates,
params and states at every step, plus the number of objective evaluations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import optree
import torch

from optax_compat import apply_updates
from optax_compat._runtime import tree_math as tm
from optax_compat._src import linesearch
from optax_compat.testing import (
    Tolerance,
    assert_leaves_close,
    assert_same_state_types,
    jax_precision,
    to_jax,
    to_torch,
)


class Problem:
    """An objective in both worlds, with its starting point and fixed data.

    Attributes:
      torch_fn: ``(params, **data) -> scalar tensor``.
      jax_fn: the same objective with ``jax.numpy``.
      params: ``dtype -> initial params`` (a torch tree).
    """

    def __init__(self, torch_fn: Callable[..., Any], jax_fn: Callable[..., Any],
                 params: Callable[[torch.dtype], Any]):
        self.torch_fn, self.jax_fn, self.params = torch_fn, jax_fn, params


def _rosenbrock(lib: Any) -> Callable[[Any], Any]:
    def fn(x):
        return lib.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    return fn


def _quadratic(lib: Any, matrix: np.ndarray, vector: np.ndarray) -> Callable[[Any], Any]:
    def fn(x):
        a, b = lib.asarray(matrix, dtype=x.dtype), lib.asarray(vector, dtype=x.dtype)
        return 0.5 * lib.sum(x * (a @ x)) - lib.sum(b * x)
    return fn


def _logistic(lib: Any, features: np.ndarray, labels: np.ndarray) -> Callable[[Any], Any]:
    def fn(params):
        w, b = params["w"], params["b"]
        x, y = lib.asarray(features, dtype=w.dtype), lib.asarray(labels, dtype=w.dtype)
        logits = x @ w + b
        # log(1 + exp(z)) - y z, written stably and identically in both libraries.
        softplus = lib.where(logits > 0, logits, 0.0) + lib.log1p(lib.exp(-lib.abs(logits)))
        losses = softplus - y * logits
        return lib.mean(losses) + 0.05 * lib.sum(w * w)
    return fn


def _spd_matrix(dim: int, seed: int, condition: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    return (q * np.geomspace(1.0, condition, dim)) @ q.T


def _problems() -> dict[str, Problem]:
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    matrix, vector = _spd_matrix(12, seed=1, condition=300.0), rng.normal(size=12)
    features = rng.normal(size=(40, 5))
    labels = (features @ rng.normal(size=5) + 0.5 * rng.normal(size=40) > 0).astype(float)

    def tensor(values: Any) -> Callable[[torch.dtype], torch.Tensor]:
        return lambda dtype: torch.tensor(values, dtype=dtype)

    return {
        "quadratic": Problem(_quadratic(torch, matrix, vector), _quadratic(jnp, matrix, vector),
                             tensor(rng.normal(size=12))),
        "rosenbrock2": Problem(_rosenbrock(torch), _rosenbrock(jnp), tensor([-1.2, 1.0])),
        "rosenbrock10": Problem(_rosenbrock(torch), _rosenbrock(jnp),
                                tensor(np.linspace(-1.0, 0.5, 10))),
        "logistic": Problem(_logistic(torch, features, labels), _logistic(jnp, features, labels),
                            lambda dtype: {"w": torch.zeros(5, dtype=dtype),
                                           "b": torch.tensor(0.3, dtype=dtype)}),
    }


PROBLEMS = _problems()


class CountingFn:
    """Wraps an objective and counts its evaluations."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn, self.calls = fn, 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.fn(*args, **kwargs)


def torch_value_and_grad(fn: Callable[..., Any], params: Any, **data: Any) -> tuple[Any, Any]:
    """Value and gradient of ``fn`` at ``params`` with plain torch.autograd (the test's own)."""
    leaves, spec = tm.flatten(params)
    inputs = [x.detach().clone().requires_grad_(True) for x in leaves]
    value = fn(tm.unflatten(spec, inputs), **data)
    return value.detach(), tm.unflatten(spec, list(torch.autograd.grad(value, inputs)))


def _strongly_typed(tree: Any) -> Any:
    """``tree`` with JAX's weak types dropped, so that a jitted update compiles only once."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), tree)


def _state_from_optax(theirs_state: Any, like: Any) -> Any:
    """Optax's state as a torch state with our classes and dtypes (for re-synchronising)."""
    import jax

    ours_leaves, spec = tm.flatten(like)
    theirs_leaves = [torch.from_numpy(np.array(x)) for x in jax.tree.leaves(theirs_state)]
    assert len(theirs_leaves) == len(ours_leaves)
    return tm.unflatten(spec, [t.to(o.dtype) for t, o in zip(theirs_leaves, ours_leaves)])


def run_against_optax(
    ours_tx: Any,
    theirs_tx: Any,
    problem: Problem,
    *,
    steps: int,
    dtype: torch.dtype = torch.float64,
    rtol: Tolerance = None,
    atol: Tolerance = None,
    data: Callable[[int], dict[str, torch.Tensor]] | None = None,
    resync: bool = False,
    reuse_value_and_grad: bool = True,
) -> Any:
    """Runs ``ours_tx`` and ``theirs_tx`` on ``problem`` side by side, comparing every step.

    Args:
      ours_tx: the optax_compat solver.
      theirs_tx: the same real Optax solver (built inside :func:`jax_precision`).
      problem: the objective.
      steps: number of updates.
      dtype: float32 (JAX in 32-bit mode) or float64 (JAX with x64).
      rtol: relative tolerance for updates, params and state leaves (by default that of the
        dtype of the values compared; a number or ``{dtype: rtol}`` overrides it).
      atol: absolute tolerance, likewise.
      data: ``step -> {name: tensor}`` extra arguments of the objective (a batch).
      resync: restart each step of ours from Optax's params and state, so that rounding
        differences are not amplified by chaotic trajectories (e.g. Rosenbrock).
      reuse_value_and_grad: take value and gradient from the state with
        ``value_and_grad_from_state`` when the solver stores them (else evaluate them afresh
        each step).

    Returns:
      Our final state.
    """
    import jax
    import optax

    counted = CountingFn(problem.torch_fn)
    ours_value_and_grad = linesearch.value_and_grad_from_state(counted)
    expected_calls = 0
    with jax_precision(dtype):
        params = problem.params(dtype)
        theirs_params = to_jax(params)
        state, theirs_state = ours_tx.init(params), theirs_tx.init(theirs_params)
        theirs_state = _strongly_typed(theirs_state)
        assert_same_state_types(state, theirs_state)
        theirs_update = jax.jit(functools.partial(theirs_tx.update, value_fn=problem.jax_fn))
        for step in range(steps):
            batch = data(step) if data else {}
            theirs_batch = to_jax(batch)
            stored_value = optax.tree.get(theirs_state, "value")
            stored_grad = optax.tree.get(theirs_state, "grad")
            reuse = reuse_value_and_grad and stored_grad is not None
            if reuse and bool(jax.numpy.isfinite(stored_value)):
                theirs_value, theirs_grad = stored_value, stored_grad
            else:
                theirs_value, theirs_grad = _strongly_typed(jax.value_and_grad(problem.jax_fn)(
                    theirs_params, **theirs_batch))
                expected_calls += 1
            if reuse:
                value, grad = ours_value_and_grad(params, state=state, **batch)
            else:
                value, grad = torch_value_and_grad(counted, params, **batch)
            assert_leaves_close(value, theirs_value, rtol, atol, what=f"value step {step}")
            updates, state = ours_tx.update(grad, state, params, value=value, grad=grad,
                                            value_fn=counted, **batch)
            theirs_updates, theirs_state = theirs_update(
                theirs_grad, theirs_state, theirs_params, value=theirs_value, grad=theirs_grad,
                **theirs_batch)
            theirs_state = _strongly_typed(theirs_state)
            evaluations = optax.tree.get(theirs_state, "num_linesearch_steps")
            expected_calls += 0 if evaluations is None else int(evaluations)
            assert counted.calls == expected_calls, f"step {step}: evaluations of value_fn"
            assert_same_state_types(state, theirs_state)
            assert_leaves_close(updates, theirs_updates, rtol, atol, what=f"updates step {step}")
            assert_leaves_close(state, theirs_state, rtol, atol, what=f"state step {step}")
            params = apply_updates(params, updates)
            theirs_params = optax.apply_updates(theirs_params, theirs_updates)
            assert_leaves_close(params, theirs_params, rtol, atol, what=f"params step {step}")
            if resync:
                params = optree.tree_map(lambda o, t: t.to(o.dtype), params,
                                         to_torch(theirs_params))
                state = _state_from_optax(theirs_state, state)
    return state
