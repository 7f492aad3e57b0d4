"""Property checks for gradient transformations: purity, stable state, gradients, compilation.

Each check runs ``init`` and a few ``update`` steps on the given parameters and gradients and
raises ``AssertionError`` with a short reason naming the step and the tree path at fault.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from optax_compat._runtime import tree_math
from optax_compat._runtime.compilation import compile_options
from optax_compat._src import base
from optax_compat._src.update import apply_updates
from optax_compat.testing._asserts import (
    ATOL,
    RTOL,
    Tolerance,
    assert_trees_all_close,
    leaves_with_paths,
)
from optax_compat.testing._data import make_tree
from optax_compat.testing._steps import (
    ExtraArgsLike,
    GradsLike,
    extra_args_at,
    grads_at,
    train_step,
)


class Snapshot:
    """Remembers a tree's containers, leaf objects, tensor versions and values."""

    def __init__(self, tree: Any, what: str) -> None:
        self.tree, self.what = tree, what
        self.spec = tree_math.treespec(tree)
        self.leaves = leaves_with_paths(tree)
        self.records = [(path, leaf, leaf._version, leaf.detach().clone())
                        for path, leaf in self.leaves if isinstance(leaf, torch.Tensor)]

    def assert_unchanged(self, during: str) -> None:
        now = leaves_with_paths(self.tree)
        if (tree_math.treespec(self.tree) != self.spec
                or any(a is not b for (_, a), (_, b) in zip(now, self.leaves, strict=False))):
            raise AssertionError(f"{during} modified the containers of {self.what} in place "
                                 f"(its leaves are no longer the objects passed in).")
        for path, leaf, version, values in self.records:
            if leaf._version != version or not _equal_with_nan(leaf, values):
                raise AssertionError(f"{during} modified {self.what}{path} in place.")


def checked_pure_update(tx: base.GradientTransformation, grad: Any, state: Any, params: Any,
                        kwargs: dict[str, Any], during: str) -> tuple[Any, Any]:
    """``tx.update(grad, state, params, **kwargs)``, checked to leave its three inputs as they
    were (raising ``AssertionError`` that names ``during`` and the input modified)."""
    snapshots = [Snapshot(grad, "updates"), Snapshot(state, "state"), Snapshot(params, "params")]
    result = tx.update(grad, state, params, **kwargs)
    for taken in snapshots:
        taken.assert_unchanged(during)
    return result


def _equal_with_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def check_pure(tx: base.GradientTransformation, params: Any, grads: GradsLike, steps: int = 2,
               extra_args: ExtraArgsLike = None) -> None:
    """Checks that ``init`` and ``update`` never mutate their inputs and are repeatable.

    ``init(params)`` must leave ``params`` alone; each ``update(grads, state, params)`` must leave
    all three alone (containers, tensor values and tensor version counters), and calling it a
    second time with the same inputs must give the same updates and state.

    Args:
      tx: the transformation under test.
      params: parameters.
      grads: a gradient tree used at every step, or ``step -> gradient tree``.
      steps: number of update steps (the params are updated between steps).
      extra_args: extra keyword arguments for ``update``, or ``step -> arguments``.

    Raises:
      AssertionError: naming the call (``init``, ``update 1``, ...), the input and the path
        that was modified.
    """
    snapshot = Snapshot(params, "params")
    state = tx.init(params)
    snapshot.assert_unchanged("init")
    for step in range(steps):
        grad, kwargs = grads_at(grads, step), extra_args_at(extra_args, step)
        during = f"update {step + 1}"
        updates, new_state = checked_pure_update(tx, grad, state, params, kwargs, during)
        again_updates, again_state = tx.update(grad, state, params, **kwargs)
        assert_trees_all_close(again_updates, updates, rtol=0.0, atol=0.0,
                               what=f"a repeated {during}: updates")
        assert_trees_all_close(again_state, new_state, rtol=0.0, atol=0.0,
                               what=f"a repeated {during}: state")
        params, state = apply_updates(params, updates), new_state


def _leaf_signature(leaf: Any) -> str:
    if isinstance(leaf, torch.Tensor):
        return f"{tuple(leaf.shape)} {leaf.dtype} on {leaf.device}"
    return type(leaf).__name__


def check_state_stable(tx: base.GradientTransformation, params: Any, grads: GradsLike,
                       steps: int = 3, extra_args: ExtraArgsLike = None) -> None:
    """Checks that the state keeps its structure, shapes, dtypes and devices across steps.

    Args:
      tx: the transformation under test.
      params: parameters.
      grads: a gradient tree used at every step, or ``step -> gradient tree``.
      steps: number of update steps.
      extra_args: extra keyword arguments for ``update``, or ``step -> arguments``.

    Raises:
      AssertionError: naming the update (counted from 1) and the first state path that
        changed.
    """
    initial = state = tx.init(params)
    expected = leaves_with_paths(initial)
    for step in range(steps):
        params, _, state = train_step(tx, params, state, grads_at(grads, step),
                                      extra_args_at(extra_args, step))
        where = f"The state after update {step + 1} differs from the initial state"
        if tree_math.treespec(state) != tree_math.treespec(initial):
            difference = tree_math.first_difference(initial, state, 'the initial state',
                                                    'the state')
            raise AssertionError(f"{where}: {difference}.")
        for (path, before), (_, after) in zip(expected, leaves_with_paths(state), strict=True):
            if _leaf_signature(before) != _leaf_signature(after):
                raise AssertionError(f"{where} at {path}: {_leaf_signature(before)} became "
                                     f"{_leaf_signature(after)}.")


def _fixed_weights(leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(leaf.shape, generator=generator, dtype=torch.float64,
                        device=generator.device).to(leaf.device) for leaf in leaves]


def check_differentiable(tx: base.GradientTransformation | Callable[[torch.Tensor], Any],
                         params: Any, grads: GradsLike, steps: int = 2,
                         hyperparameter: torch.Tensor | float | None = None,
                         extra_args: ExtraArgsLike = None, atol: float = 1e-5,
                         rtol: float = 1e-3) -> None:
    """Checks autograd through ``steps`` updates against finite differences (in float64).

    The gradient at each step is that of a quadratic around the drawn gradient,
    ``grads + params``, so the updates depend on the parameters as in meta-learning. The
    function checked with :func:`torch.autograd.gradcheck` is a fixed random weighting of the
    parameters after ``steps`` steps, as a function of the initial parameters or, when
    ``hyperparameter`` is given, of that hyperparameter (``tx`` is then a factory taking it).

    Args:
      tx: the transformation under test, or ``hyperparameter -> transformation``.
      params: initial parameters (cast to float64).
      grads: a gradient tree used at every step, or ``step -> gradient tree``.
      steps: number of update steps.
      hyperparameter: the value at which to differentiate w.r.t. a hyperparameter.
      extra_args: extra keyword arguments for ``update``, or ``step -> arguments``.
      atol: absolute tolerance of the gradient comparison.
      rtol: relative tolerance of the gradient comparison.

    Raises:
      AssertionError: with gradcheck's reason when the gradients disagree or do not exist.
      ValueError: when differentiating w.r.t. params that have no leaves.
    """
    to_float64 = lambda tree: tree_math.tree_map(lambda x: x.detach().to(torch.float64), tree)
    param_leaves, spec = tree_math.flatten(to_float64(params))
    weights = _fixed_weights(param_leaves)

    def objective(*inputs: torch.Tensor) -> torch.Tensor:
        if hyperparameter is None:
            transform, current = tx, tree_math.unflatten(spec, list(inputs))
        else:
            transform, current = tx(inputs[0]), tree_math.unflatten(spec, param_leaves)
        state = transform.init(current)
        for step in range(steps):
            grad = tree_math.unflatten(spec, tree_math.add(
                tree_math.leaves(to_float64(grads_at(grads, step))), tree_math.leaves(current)))
            current, _, state = train_step(transform, current, state, grad,
                                           extra_args_at(extra_args, step))
        total = torch.zeros((), dtype=torch.float64)
        for weight, leaf in zip(weights, tree_math.leaves(current), strict=True):
            total = total + (weight * leaf).sum()
        return total

    if hyperparameter is None:
        if not param_leaves:
            raise ValueError("check_differentiable needs params with at least one leaf.")
        inputs = [leaf.clone().requires_grad_() for leaf in param_leaves]
    else:
        inputs = [torch.as_tensor(hyperparameter, dtype=torch.float64).clone().requires_grad_()]
    try:
        torch.autograd.gradcheck(objective, inputs, atol=atol, rtol=rtol, fast_mode=True)
    except RuntimeError as error:  # GradcheckError and autograd's own errors
        wrt = "the parameters" if hyperparameter is None else "the hyperparameter"
        reason = str(error).strip().splitlines()[0]
        raise AssertionError(f"The parameters after {steps} steps are not correctly "
                             f"differentiable w.r.t. {wrt}: {reason}") from error


def _cloned(tree: Any) -> Any:
    return tree_math.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def _fresh_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of ``fn`` with its own code object, so that Dynamo compiles it from scratch.

    Dynamo caches compiled frames on the code object; a step function defined inside a check
    shares its code object across calls, and reaching the recompilation limit would silently
    fall back to eager execution.
    """
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def check_compilable(tx: base.GradientTransformation, params: Any, grads: GradsLike,
                     backend: str = "inductor", extra_args: ExtraArgsLike = None,
                     rtol: Tolerance = None, atol: Tolerance = None) -> None:
    """Checks that ``torch.compile`` of one training step has no graph break and matches eager.

    The step is ``update`` followed by ``apply_updates``. It must compile with
    ``fullgraph=True`` (one graph, so the default mode compiles the same graph) and give the
    eager numbers: a host synchronisation (``.item()``, a Python ``if`` on a tensor) or an
    unsupported construct fails the check, and ``torch._dynamo.explain`` then names the graph
    breaks.

    Args:
      tx: the transformation under test.
      params: parameters.
      grads: the gradient tree (or ``step -> gradient tree``; step 0 is used).
      backend: the ``torch.compile`` backend (``"eager"`` checks graph capture only, quickly).
      extra_args: extra keyword arguments for ``update``, or ``step -> arguments``.
      rtol: relative tolerance against eager (a number or ``{dtype: rtol}``); by default ten
        times the usual one of the dtype of the values compared.
      atol: absolute tolerance against eager; likewise.

    Raises:
      AssertionError: with the compiler's reason or the graph breaks, or naming the first path
        that differs.
    """
    state, grad, kwargs = tx.init(params), grads_at(grads, 0), extra_args_at(extra_args, 0)

    def step(params: Any, state: Any, grad: Any) -> tuple[Any, Any, Any]:
        return train_step(tx, params, state, grad, kwargs)

    # Each run gets its own copy of the inputs, so that a transformation that mutates them is
    # reported by check_pure and not as a compilation mismatch.
    eager = step(*_cloned((params, state, grad)))
    torch._dynamo.reset()
    compiled_step = torch.compile(_fresh_function(step), fullgraph=True, backend=backend,
                                  options=compile_options(backend))
    try:
        compiled = compiled_step(*_cloned((params, state, grad)))
    except Exception as error:  # Dynamo and Inductor raise many types
        raise AssertionError(f"torch.compile(fullgraph=True) of one step failed: "
                             f"{type(error).__name__}: {_first_line(error)}"
                             f"{_graph_breaks(step, (params, state, grad))}") from error
    assert_trees_all_close(
        compiled, eager,
        rtol={dtype: 10 * value for dtype, value in RTOL.items()} if rtol is None else rtol,
        atol={dtype: 10 * value for dtype, value in ATOL.items()} if atol is None else atol,
        what="compiled (fullgraph=True) (params, updates, state)")


def _graph_breaks(step: Callable[..., Any], inputs: tuple[Any, ...]) -> str:
    """``torch._dynamo.explain``'s graph breaks in ``step``, as the end of an error message."""
    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(_fresh_function(step))(*_cloned(inputs))
    except Exception as error:  # Dynamo raises many types
        return f"; torch._dynamo.explain failed too: {type(error).__name__}: {_first_line(error)}"
    reasons = "; ".join(str(b.reason).splitlines()[0] for b in explained.break_reasons)
    return f"; {explained.graph_break_count} graph break(s): {reasons}" if reasons else ""


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else ""


def assert_inplace_matches_pure(tx: base.GradientTransformation,
                                dtype: torch.dtype = torch.float32, steps: int = 5,
                                params: Any = None, grads: Sequence[Any] | None = None) -> None:
    """Checks that ``update(..., inplace=True)`` gives the pure path's numbers, in place.

    Runs ``tx.update`` with ``inplace=False`` and ``inplace=True`` side by side: both must give
    bit-identical updates and states at every step (NaNs in the same places), the pure path
    must leave its inputs untouched, and the in-place path must write the updates into the
    incoming tensors and keep its floating-point state buffers (same storage) from step to step.

    Args:
      tx: a transformation that supports ``inplace=True``.
      dtype: the dtype of the default params and gradients.
      steps: number of steps with the default gradients.
      params: params (:func:`make_tree` by default).
      grads: one gradient tree per step (random trees like the params by default).

    Raises:
      AssertionError: naming the step and what differs.
    """
    params = make_tree(dtype, seed=0) if params is None else params
    grads = [make_tree(dtype, seed=i + 1) for i in range(steps)] if grads is None else grads

    def clone(tree: Any) -> Any:
        return tree_math.tree_map(torch.clone, tree)

    def float_buffers(state: Any) -> list[int]:
        return [x.data_ptr() for x in tree_math.leaves(state)
                if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0]

    def same(a: Any, b: Any) -> bool:
        return torch.equal(a, b) or (a.is_floating_point() and _equal_with_nan(a, b))

    pure_state, inplace_state = tx.init(params), tx.init(params)
    for step, grad in enumerate(grads):
        pure_grad, inplace_grad = clone(grad), clone(grad)
        pure_updates, pure_state = tx.update(pure_grad, pure_state, params)
        if not all(map(same, tree_math.leaves(pure_grad), tree_math.leaves(grad))):
            raise AssertionError(f"step {step}: the pure path mutated its updates")
        buffers = float_buffers(inplace_state)
        inplace_updates, inplace_state = tx.update(inplace_grad, inplace_state, params,
                                                   inplace=True)
        for what, ours, ref in (("updates", inplace_updates, pure_updates),
                                ("state", inplace_state, pure_state)):
            ours_leaves, ref_leaves = tree_math.leaves(ours), tree_math.leaves(ref)
            if len(ours_leaves) != len(ref_leaves) or not all(map(same, ours_leaves,
                                                                  ref_leaves)):
                raise AssertionError(f"step {step}: in-place {what} differ from the pure path")
        if ([u.data_ptr() for u in tree_math.leaves(inplace_updates)]
                != [g.data_ptr() for g in tree_math.leaves(inplace_grad)]):
            raise AssertionError(f"step {step}: updates not written in place")
        if float_buffers(inplace_state) != buffers:
            raise AssertionError(f"step {step}: state buffers not reused")
