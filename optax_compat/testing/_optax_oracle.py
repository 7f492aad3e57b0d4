"""Comparing a transformation with the same configuration in real Optax, step by step."""

from __future__ import annotations

import functools
import unittest
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import optree
import torch

from optax_compat._src.building_blocks import tree_math
from optax_compat.testing._asserts import (
    ATOL,
    RTOL,
    as_tensor,
    assert_trees_all_close,
    leaves_with_paths,
)
from optax_compat.testing._config import build_value
from optax_compat.testing._steps import ExtraArgsLike, GradsLike, extra_args_at, grads_at


def _import_optax() -> tuple[Any, Any]:
    try:
        import jax
        import optax
    except ImportError as error:
        raise unittest.SkipTest(f"check_matches_optax needs real Optax and JAX: {error}") from error
    return jax, optax


def _to_jax(tree: Any) -> Any:
    """Torch tensors in ``tree`` as JAX arrays of the same dtype; other leaves unchanged."""
    import jax.numpy as jnp

    def convert(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        array = leaf.detach().cpu()
        if array.dtype == torch.bfloat16:
            return jnp.asarray(array.float().numpy(), dtype=jnp.bfloat16)
        return jnp.asarray(array.numpy())

    return optree.tree_map(convert, tree, none_is_leaf=tree_math.NONE_IS_LEAF)


def _build(name_or_factory: str | Callable[..., Any], module: Any,
           kwargs: Mapping[str, Any]) -> Any:
    kwargs = build_value(dict(kwargs), module)
    if callable(name_or_factory):
        return name_or_factory(module, **kwargs)
    return functools.reduce(getattr, name_or_factory.split("."), module)(**kwargs)


def _state_classes(state: Any) -> list[tuple[str, tuple[str, ...]]]:
    """The NamedTuple classes and their fields met in a depth-first walk of ``state``."""
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


def _without_keys(ours: Any, theirs: Any) -> tuple[list[Any], list[Any]]:
    """The leaves of both states, minus random keys (compared statistically, not bit for bit)."""
    ours_leaves, theirs_leaves = leaves_with_paths(ours), leaves_with_paths(theirs)
    if len(ours_leaves) != len(theirs_leaves):
        raise AssertionError(
            f"The state has {len(ours_leaves)} leaves where Optax's has {len(theirs_leaves)}: "
            f"ours {[p for p, _ in ours_leaves]}, Optax's {[p for p, _ in theirs_leaves]}.")
    kept = [(mine, ref) for (_, mine), (_, ref) in zip(ours_leaves, theirs_leaves, strict=True)
            if "key" not in str(getattr(ref, "dtype", ""))]
    return [mine for mine, _ in kept], [ref for _, ref in kept]


def _narrowest_float_dtype(leaves: list[Any]) -> torch.dtype:
    dtypes = [leaf.dtype for leaf in leaves
              if isinstance(leaf, torch.Tensor) and leaf.dtype.is_floating_point]
    return max(dtypes, key=lambda dtype: torch.finfo(dtype).eps) if dtypes else torch.float64


def check_matches_optax(name_or_factory: str | Callable[..., Any],
                        kwargs: Mapping[str, Any] | None, params: Any, grads: GradsLike,
                        steps: int = 3, extra_args: ExtraArgsLike = None,
                        rtol: float | None = None, atol: float | None = None) -> None:
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
      rtol: relative tolerance; by default that of the least precise floating dtype among
        the params and the state (float32 1e-5, float64 1e-10).
      atol: absolute tolerance; by default likewise (float32 1e-6, float64 1e-12).

    Raises:
      AssertionError: naming the step, the tree (updates, state or params) and the path.
    """
    jax, optax = _import_optax()
    import optax_compat

    kwargs = dict(kwargs or {})
    dtype = tree_math.widest_real_dtype(tree_math.leaves(params))
    x64 = dtype == torch.float64
    with jax.enable_x64(x64), optax_compat.config.enable_x64(x64):
        ours_tx = _build(name_or_factory, optax_compat, kwargs)
        theirs_tx = _build(name_or_factory, optax, _to_jax(kwargs))
        theirs_params = _to_jax(params)
        ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(theirs_params)
        # Numbers can only agree to the precision of the least precise tensor involved, such
        # as a float32 moment (``mu_dtype``) of float64 parameters.
        narrowest = _narrowest_float_dtype([*tree_math.leaves(params),
                                            *tree_math.leaves(ours_state)])
        rtol = RTOL.get(narrowest, 1e-5) if rtol is None else rtol
        atol = ATOL.get(narrowest, 1e-6) if atol is None else atol
        for step in range(-1, steps):
            if step >= 0:
                grad, step_kwargs = grads_at(grads, step), extra_args_at(extra_args, step)
                # Optax gets its copy first: a mutating transformation is check_pure's to report.
                theirs_updates, theirs_state = theirs_tx.update(
                    _to_jax(grad), theirs_state, theirs_params, **_to_jax(step_kwargs))
                ours_updates, ours_state = ours_tx.update(grad, ours_state, params, **step_kwargs)
                assert_trees_all_close(ours_updates, theirs_updates, rtol, atol,
                                       what=f"update {step + 1}: updates")
                params = optax_compat.apply_updates(params, ours_updates)
                theirs_params = optax.apply_updates(theirs_params, theirs_updates)
                assert_trees_all_close(params, theirs_params, rtol, atol,
                                       what=f"update {step + 1}: params")
            when = "init: state" if step < 0 else f"update {step + 1}: state"
            if _state_classes(ours_state) != _state_classes(theirs_state):
                raise AssertionError(f"{when} has the NamedTuple types "
                                     f"{_state_classes(ours_state)}; Optax's has "
                                     f"{_state_classes(theirs_state)}.")
            ours_leaves, theirs_leaves = _without_keys(ours_state, theirs_state)
            assert_trees_all_close(ours_leaves, [np.asarray(as_tensor(x)) for x in theirs_leaves],
                                   rtol, atol, what=when)
