"""Real Optax as the oracle: the same configuration on the same numbers in both worlds.

A comparison builds the transformation (or function) in ``optax_compat`` and in Optax, moves
the numbers across (numpy in the middle), runs both, and compares updates, params and every
state leaf, plus the classes and fields of the state NamedTuples. JAX and Optax are imported
only when a comparison runs: they are test-only dependencies.
"""

from __future__ import annotations

import contextlib
import functools
import unittest
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import optree
import torch

from optax_compat._runtime import tree_math
from optax_compat._runtime.config import config
from optax_compat._src.update import apply_updates
from optax_compat.testing._asserts import (
    ATOL,
    RTOL,
    Tolerance,
    assert_leaves_close,
    least_precise_dtype,
)
from optax_compat.testing._config import build_value
from optax_compat.testing._data import make_tree
from optax_compat.testing._steps import ExtraArgsLike, GradsLike, extra_args_at, grads_at


def _import_optax() -> tuple[Any, Any]:
    try:
        import jax
        import optax
    except ImportError as error:
        raise unittest.SkipTest(f"comparing with Optax needs real Optax and JAX: {error}") \
            from error
    return jax, optax


@contextlib.contextmanager
def jax_precision(dtype: torch.dtype) -> Iterator[None]:
    """Runs JAX and this package in 64-bit mode for float64 (and complex128) and in their
    default 32-bit mode otherwise, as users run JAX: float32 programs with x64 off, float64
    programs with it on (``optax_compat.config`` plays the role of ``jax_enable_x64``)."""
    jax, _ = _import_optax()
    x64 = dtype in (torch.float64, torch.complex128)
    with jax.enable_x64(x64), config.enable_x64(x64):
        yield


def to_numpy(x: Any) -> np.ndarray:
    """A numpy copy-free view of a torch tensor (detached, on the CPU), or ``np.asarray(x)``."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def to_jax(tree: Any) -> Any:
    """``tree`` with its torch tensors and numpy arrays as JAX arrays of the same dtype.

    Other leaves (Python numbers, flags, strings) are passed unchanged, so that JAX sees them
    as users write them (weakly typed numbers). NamedTuples keep their class.
    """
    import jax.numpy as jnp

    def convert(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            leaf = leaf.detach().cpu()
            if leaf.dtype == torch.bfloat16:
                return jnp.asarray(leaf.float().numpy(), dtype=jnp.bfloat16)
            return jnp.asarray(leaf.numpy())
        return jnp.asarray(leaf) if isinstance(leaf, np.ndarray) else leaf

    return optree.tree_map(convert, tree, none_is_leaf=tree_math.NONE_IS_LEAF)


def to_torch(tree: Any) -> Any:
    """A JAX (or numpy) tree as a torch tree of the same structure."""
    return optree.tree_map(lambda x: torch.from_numpy(np.array(x)), tree,
                           none_is_leaf=tree_math.NONE_IS_LEAF)


def state_signature(state: Any) -> list[tuple[str, tuple[str, ...]]]:
    """The NamedTuple classes and their fields met in a depth-first walk of ``state``.

    Dict entries are visited in sorted key order, as JAX and optree flatten them, so the
    signatures of an ``optax_compat`` state and of Optax's state compare equal when their types
    do.
    """
    found = []

    def visit(node: Any) -> None:
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            found.append((type(node).__name__, tuple(node._fields)))
        children = ([node[key] for key in sorted(node, key=str)] if isinstance(node, dict)
                    else node if isinstance(node, (list, tuple)) else ())
        for child in children:
            visit(child)

    visit(state)
    return found


def assert_same_state_types(ours: Any, theirs: Any, what: str = "state") -> None:
    """Asserts that two states have the same NamedTuple classes and fields, in order.

    Raises:
      AssertionError: listing both signatures.
    """
    if state_signature(ours) != state_signature(theirs):
        raise AssertionError(f"{what} has the NamedTuple types {state_signature(ours)}; "
                             f"Optax's has {state_signature(theirs)}.")


def jit_optax(tx: Any) -> Any:
    """An Optax transformation whose ``update`` is compiled once with ``jax.jit``.

    Eager JAX compiles every operation on first use, which makes multi-step oracle runs slow;
    one jitted ``update`` is much faster and computes the same numbers up to XLA's fusion.
    """
    jax, _ = _import_optax()
    return type(tx)(tx.init, jax.jit(tx.update))


def _floored(defaults: Mapping[torch.dtype, float], floor: torch.dtype | None) -> dict:
    """``defaults`` with every tolerance raised to at least that of ``floor``."""
    least = defaults.get(floor, 0.0)
    return {dtype: max(value, least) for dtype, value in defaults.items()}


def _run_side_by_side(ours_tx: Any, theirs_tx: Any, params: Any, grads: GradsLike, steps: int,
                      extra_args: ExtraArgsLike, apply: bool, rtol: Tolerance,
                      atol: Tolerance) -> tuple[Any, Any]:
    """The one comparison loop of :func:`compare_with_optax` and :func:`check_matches_optax`."""
    _, optax = _import_optax()
    theirs_params = to_jax(params)
    ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(theirs_params)
    for step in range(-1, steps):
        if step >= 0:
            grad, step_kwargs = grads_at(grads, step), extra_args_at(extra_args, step)
            # Optax gets its copy first: a mutating transformation is check_pure's to report.
            theirs_updates, theirs_state = theirs_tx.update(
                to_jax(grad), theirs_state, theirs_params, **to_jax(step_kwargs))
            ours_updates, ours_state = ours_tx.update(grad, ours_state, params, **step_kwargs)
            assert_leaves_close(ours_updates, theirs_updates, rtol, atol,
                                what=f"update {step + 1}: updates")
            if apply:
                params = apply_updates(params, ours_updates)
                theirs_params = optax.apply_updates(theirs_params, theirs_updates)
                assert_leaves_close(params, theirs_params, rtol, atol,
                                    what=f"update {step + 1}: params")
        when = "init: state" if step < 0 else f"update {step + 1}: state"
        assert_same_state_types(ours_state, theirs_state, what=when)
        assert_leaves_close(ours_state, theirs_state, rtol, atol, what=when)
    return ours_state, theirs_state


def compare_with_optax(
    ours_tx: Any, optax_tx: Callable[[], Any], dtype: torch.dtype = torch.float32,
    steps: int = 5, params: Any = None, grads: Sequence[Any] | None = None, apply: bool = True,
    extra_args: ExtraArgsLike = None, rtol: Tolerance = None, atol: Tolerance = None,
) -> tuple[Any, Any]:
    """Runs init and ``update`` steps of a transformation and of Optax's, comparing everything.

    At init and after every step, the states must have the same NamedTuple classes and fields
    and close leaves; the updates and (with ``apply``) the params after ``apply_updates`` must
    be close too. Tolerances follow the dtypes of the values compared (see
    :func:`optax_compat.testing.tolerance`).

    Args:
      ours_tx: the ``optax_compat`` transformation.
      optax_tx: a zero-argument callable returning the same Optax transformation (called
        inside the JAX precision context of ``dtype``).
      dtype: float32 or float64: the dtype of the default params and gradients, and JAX's
        precision (x64 on for float64).
      steps: number of steps with the default gradients.
      params: initial params (:func:`make_tree` by default).
      grads: one gradient tree per step (random trees like the params by default).
      apply: apply the updates to the params between steps.
      extra_args: extra keyword arguments for ``update``, or ``step -> arguments``.
      rtol: relative tolerance: a number, ``{dtype: rtol}`` overrides, or ``None``.
      atol: absolute tolerance, likewise.

    Returns:
      The final (ours, Optax's) states.

    Raises:
      AssertionError: naming the step, the tree (updates, params or state) and the path.
    """
    params = make_tree(dtype, seed=0) if params is None else params
    grads = [make_tree(dtype, seed=i + 1) for i in range(steps)] if grads is None else grads
    with jax_precision(dtype):
        return _run_side_by_side(ours_tx, optax_tx(), params, lambda step: grads[step],
                                 len(grads), extra_args, apply, rtol, atol)


def _build(name_or_factory: str | Callable[..., Any], module: Any,
           kwargs: Mapping[str, Any]) -> Any:
    kwargs = build_value(dict(kwargs), module)
    if callable(name_or_factory):
        return name_or_factory(module, **kwargs)
    return functools.reduce(getattr, name_or_factory.split("."), module)(**kwargs)


def check_matches_optax(name_or_factory: str | Callable[..., Any],
                        kwargs: Mapping[str, Any] | None, params: Any, grads: GradsLike,
                        steps: int = 3, extra_args: ExtraArgsLike = None,
                        rtol: Tolerance = None, atol: Tolerance = None) -> None:
    """Checks that a configuration gives Optax's numbers: updates, state leaves and params.

    Both worlds run ``steps`` steps of ``update`` then ``apply_updates`` on the same numbers;
    state NamedTuple classes and fields must match too. In float64, JAX and this package run in
    64-bit mode (``jax_enable_x64`` and ``optax_compat.config``), in 32-bit mode otherwise.
    Raises :class:`unittest.SkipTest` (a skip under pytest) when Optax is not importable.

    Args:
      name_or_factory: a public name such as ``"adamw"`` or ``"contrib.muon"``, built as
        ``optax.<name>(**kwargs)`` and ``optax_compat.<name>(**kwargs)``; or a factory
        ``(module, **kwargs) -> transformation`` called with each module, e.g.
        ``lambda optax: optax.chain(optax.clip(1.0), optax.sgd(0.1))``.
      kwargs: keyword arguments for the transformation (tensors and torch dtypes are
        converted for Optax; drawn schedules and configurations are built in each world).
      params: initial parameters (torch).
      grads: a gradient tree used at every step, or ``step -> gradient tree``.
      steps: number of steps.
      extra_args: extra keyword arguments for ``update``, or ``step -> arguments``.
      rtol: relative tolerance (a number or ``{dtype: rtol}``); by default that of the dtype
        of the values compared, and at least that of the least precise floating dtype among
        the params and the initial state (a float32 ``mu_dtype`` of float64 params makes every
        comparison a float32 one).
      atol: absolute tolerance; likewise.

    Raises:
      AssertionError: naming the step, the tree (updates, state or params) and the path.
    """
    _, optax = _import_optax()
    import optax_compat

    kwargs = dict(kwargs or {})
    dtype = tree_math.widest_real_dtype(tree_math.leaves(params))
    with jax_precision(dtype):
        ours_tx = _build(name_or_factory, optax_compat, kwargs)
        theirs_tx = _build(name_or_factory, optax, to_jax(kwargs))
        # Numbers can only agree to the precision of the least precise tensor involved.
        floor = least_precise_dtype(params, ours_tx.init(params))
        rtol = _floored(RTOL, floor) if rtol is None else rtol
        atol = _floored(ATOL, floor) if atol is None else atol
        _run_side_by_side(ours_tx, theirs_tx, params, grads, steps, extra_args, True, rtol, atol)


def compare_function_with_optax(
    ours_fn: Callable[..., Any], theirs_fn: Callable[..., Any], args: Sequence[Any],
    kwargs: dict | None = None, dtype: torch.dtype = torch.float32,
    grad_argnums: Sequence[int] = (), rtol: Tolerance = None, atol: Tolerance = None,
    jit: bool = True,
) -> None:
    """Calls a function of tensors and its Optax counterpart on the same numbers and compares.

    The outputs are compared leaf by leaf; for each index in ``grad_argnums`` the gradient of
    the sum of the first output with respect to that argument is compared too (torch
    autograd against ``jax.grad``). Tensors in ``args``/``kwargs`` become JAX arrays for
    ``theirs_fn``, anything else is passed as is (static under ``jax.jit``).

    Args:
      ours_fn: the ``optax_compat`` function, e.g. ``optax_compat.losses.l2_loss``.
      theirs_fn: Optax's, e.g. ``optax.losses.l2_loss``.
      args: positional arguments (torch tensors or static values).
      kwargs: keyword arguments, likewise.
      dtype: JAX's precision (x64 on for float64).
      grad_argnums: the positional arguments to differentiate with respect to.
      rtol: relative tolerance (a number or ``{dtype: rtol}``); by default that of the dtype
        of the values compared.
      atol: absolute tolerance; likewise.
      jit: compile the Optax side once instead of op by op (much faster); turn it off for
        functions that branch on values.

    Raises:
      AssertionError: naming the output or the gradient that differs.
    """
    jax, _ = _import_optax()
    kwargs = kwargs or {}

    def first_sum(out: Any) -> Any:
        return (out[0] if isinstance(out, tuple) else out).sum()

    with jax_precision(dtype):
        theirs_args, theirs_kwargs = to_jax((tuple(args), kwargs))
        array_args = {i: a for i, a in enumerate(theirs_args) if isinstance(a, jax.Array)}
        array_kwargs = {k: v for k, v in theirs_kwargs.items() if isinstance(v, jax.Array)}

        def call(array_args: dict, array_kwargs: dict) -> Any:
            call_args = [array_args.get(i, a) for i, a in enumerate(theirs_args)]
            return theirs_fn(*call_args, **{**theirs_kwargs, **array_kwargs})

        def theirs_loss(*xs: Any) -> Any:
            return first_sum(call({**array_args, **dict(zip(grad_argnums, xs))}, array_kwargs))

        def outputs_and_grads(array_args: dict, array_kwargs: dict) -> tuple[Any, Any]:
            grads = jax.grad(theirs_loss, argnums=tuple(range(len(grad_argnums))))(
                *(array_args[i] for i in grad_argnums)) if grad_argnums else ()
            return call(array_args, array_kwargs), grads

        # One compiled program for the outputs and all the gradients.
        theirs_out, theirs_grads = (jax.jit(outputs_and_grads) if jit else outputs_and_grads)(
            array_args, array_kwargs)
        assert_leaves_close(ours_fn(*args, **kwargs), theirs_out, rtol, atol, what="outputs")
        if not grad_argnums:
            return
        leaves = {i: args[i].detach().clone().requires_grad_(True) for i in grad_argnums}
        ours_args = [leaves.get(i, a) for i, a in enumerate(args)]
        ours_grads = torch.autograd.grad(first_sum(ours_fn(*ours_args, **kwargs)),
                                         list(leaves.values()))
        for argnum, ours_grad, theirs_grad in zip(grad_argnums, ours_grads, theirs_grads):
            assert_leaves_close(ours_grad, theirs_grad, rtol, atol,
                                what=f"gradient wrt argument {argnum}")
