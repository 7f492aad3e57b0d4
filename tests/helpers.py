"""Shared test helpers: moving trees between PyTorch and JAX, and comparing them.

Real Optax is the oracle: a test builds the same configuration in both worlds, feeds the same
numbers (numpy in the middle), and compares updates, params and every state leaf, plus the
class names and fields of the state NamedTuples.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import optree
import torch

RTOL = {torch.float32: 1e-5, torch.float64: 1e-10}
ATOL = {torch.float32: 1e-6, torch.float64: 1e-12}


@contextlib.contextmanager
def jax_precision(dtype: torch.dtype) -> Iterator[None]:
    """Runs JAX and this package in 64-bit mode for float64 tests, in 32-bit mode otherwise."""
    import jax

    import optax_compat

    x64 = dtype == torch.float64
    with jax.enable_x64(x64), optax_compat.config.enable_x64(x64):
        yield


def to_numpy(x: Any) -> Any:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def to_jax(tree: Any) -> Any:
    """A torch tree as a JAX tree of the same structure (NamedTuples keep their class)."""
    import jax.numpy as jnp

    return optree.tree_map(lambda x: jnp.asarray(to_numpy(x)), tree, none_is_leaf=False)


def to_torch(tree: Any) -> Any:
    """A JAX (or numpy) tree as a torch tree."""
    return optree.tree_map(lambda x: torch.from_numpy(np.array(x)), tree, none_is_leaf=False)


def _leaves_with_paths(tree: Any) -> list[tuple[Any, Any]]:
    paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=False)
    return list(zip(paths, leaves))


def assert_close(ours: Any, theirs: Any, dtype: torch.dtype = torch.float32,
                 rtol: float | None = None, atol: float | None = None, what: str = "") -> None:
    """Asserts two trees (torch and JAX/numpy) have the same leaves, in order, within tolerance.

    JAX PRNG keys and generator leaves are skipped (randomness is compared statistically).
    """
    rtol = RTOL[dtype] if rtol is None else rtol
    atol = ATOL[dtype] if atol is None else atol
    ours_leaves = _leaves_with_paths(ours)
    theirs_leaves = _leaves_with_paths(theirs)
    assert len(ours_leaves) == len(theirs_leaves), (
        f"{what}: {len(ours_leaves)} leaves vs Optax's {len(theirs_leaves)}:\n"
        f"ours={[p for p, _ in ours_leaves]}\ntheirs={[p for p, _ in theirs_leaves]}")
    for (path, mine), (_, ref) in zip(ours_leaves, theirs_leaves):
        if isinstance(mine, torch.Generator) or "key" in str(getattr(ref, "dtype", "")):
            continue
        mine_np, ref_np = to_numpy(mine), np.asarray(ref)
        assert mine_np.shape == ref_np.shape, (
            f"{what}{path}: shape {mine_np.shape} vs {ref_np.shape}")
        np.testing.assert_allclose(mine_np, ref_np, rtol=rtol, atol=atol,
                                   err_msg=f"{what} at {path}")


def state_signature(state: Any) -> list[tuple[str, tuple[str, ...]]]:
    """The NamedTuple classes and fields of a state, in traversal order (for comparing types)."""
    found = []

    def visit(node: Any) -> None:
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            found.append((type(node).__name__, tuple(node._fields)))
        if isinstance(node, dict):
            for key in sorted(node, key=str):
                visit(node[key])
        elif isinstance(node, (list, tuple)):
            for child in node:
                visit(child)

    visit(state)
    return found


def assert_same_state_types(ours: Any, theirs: Any) -> None:
    assert state_signature(ours) == state_signature(theirs)


def make_tree(dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 1.0) -> dict:
    """A nested pytree with a 0-d leaf, a vector, a matrix, a tuple and a None subtree."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return scale * torch.randn(shape, generator=generator, dtype=dtype)

    return {"bias": rand(), "layer": {"w": rand(3, 4), "b": rand(4)},
            "pair": (rand(2), rand(2, 2)), "empty": None}


def compare_with_optax(
    ours_tx: Any, optax_tx: Any, dtype: torch.dtype = torch.float32, steps: int = 5,
    params: Any = None, grads: Sequence[Any] | None = None, apply: bool = True,
    extra_args: Callable[[int], dict] | None = None,
) -> tuple[Any, Any]:
    """Runs ``steps`` init/update/apply_updates steps in both worlds and compares everything.

    Args:
      ours_tx: the optax_compat transformation.
      optax_tx: a zero-argument callable returning the same Optax transformation (built inside
        the JAX precision context).
      dtype: float32 or float64.
      steps: number of steps.
      params: initial params (a tree from :func:`make_tree` by default).
      grads: a gradient tree per step (random by default).
      apply: apply the updates to the params between steps.
      extra_args: ``step -> {name: torch value}`` extra keyword arguments for ``update``.

    Returns:
      The final (ours, theirs) states.
    """
    import optax

    params = make_tree(dtype, seed=0) if params is None else params
    grads = [make_tree(dtype, seed=i + 1) for i in range(steps)] if grads is None else grads
    with jax_precision(dtype):
        theirs_tx = optax_tx()
        theirs_params = to_jax(params)
        theirs_state = theirs_tx.init(theirs_params)
        ours_state = ours_tx.init(params)
        assert_same_state_types(ours_state, theirs_state)
        assert_close(ours_state, theirs_state, dtype, what="init state")
        for step, grad in enumerate(grads):
            kwargs = extra_args(step) if extra_args else {}
            ours_updates, ours_state = ours_tx.update(grad, ours_state, params, **kwargs)
            theirs_updates, theirs_state = theirs_tx.update(
                to_jax(grad), theirs_state, theirs_params, **to_jax(kwargs))
            assert_close(ours_updates, theirs_updates, dtype, what=f"updates step {step}")
            assert_close(ours_state, theirs_state, dtype, what=f"state step {step}")
            assert_same_state_types(ours_state, theirs_state)
            if apply:
                import optax_compat

                params = optax_compat.apply_updates(params, ours_updates)
                theirs_params = optax.apply_updates(theirs_params, theirs_updates)
                assert_close(params, theirs_params, dtype, what=f"params step {step}")
    return ours_state, theirs_state


def assert_inplace_matches_pure(tx: Any, dtype: torch.dtype = torch.float32, steps: int = 5,
                                params: Any = None, grads: Sequence[Any] | None = None) -> None:
    """Runs ``tx.update`` with ``inplace=False`` and ``inplace=True`` side by side.

    Checks that both give bit-identical updates and states at every step, that the pure path
    leaves its inputs untouched, and that the in-place path writes the updates into the incoming
    tensors and keeps its floating-point state buffers (same storage) from step to step.
    """
    params = make_tree(dtype, seed=0) if params is None else params
    grads = [make_tree(dtype, seed=i + 1) for i in range(steps)] if grads is None else grads

    def leaves(tree: Any) -> list:
        return optree.tree_leaves(tree, none_is_leaf=False)

    def clone(tree: Any) -> Any:
        return optree.tree_map(torch.clone, tree, none_is_leaf=False)

    def float_buffers(state: Any) -> list[int]:
        return [x.data_ptr() for x in leaves(state)
                if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0]

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        """Bit-identical, NaNs in the same places counting as equal."""
        return torch.equal(a, b) or (a.is_floating_point() and a.shape == b.shape and bool(
            torch.isclose(a, b, rtol=0.0, atol=0.0, equal_nan=True).all()))

    pure_state, inplace_state = tx.init(params), tx.init(params)
    for step, grad in enumerate(grads):
        pure_grad, inplace_grad = clone(grad), clone(grad)
        pure_updates, pure_state = tx.update(pure_grad, pure_state, params)
        assert all(same(a, b) for a, b in zip(leaves(pure_grad), leaves(grad))), (
            f"step {step}: the pure path mutated its updates")
        buffers = float_buffers(inplace_state)
        inplace_updates, inplace_state = tx.update(inplace_grad, inplace_state, params,
                                                   inplace=True)
        for what, ours, ref in (("updates", inplace_updates, pure_updates),
                                ("state", inplace_state, pure_state)):
            ours_leaves, ref_leaves = leaves(ours), leaves(ref)
            assert len(ours_leaves) == len(ref_leaves)
            assert all(same(a, b) for a, b in zip(ours_leaves, ref_leaves)), (
                f"step {step}: in-place {what} differ from the pure path")
        written = [u.data_ptr() for u in leaves(inplace_updates)]
        assert written == [g.data_ptr() for g in leaves(inplace_grad)], (
            f"step {step}: updates not written in place")
        assert float_buffers(inplace_state) == buffers, f"step {step}: state buffers not reused"


def jit_optax(tx: Any) -> Any:
    """An Optax transformation whose ``update`` is compiled once with ``jax.jit``.

    Eager JAX compiles every operation on first use, which makes multi-step oracle runs slow;
    one jitted ``update`` per test is much faster and computes the same numbers.
    """
    import jax

    return type(tx)(tx.init, jax.jit(tx.update))


def _tensors_to_jax(tree: Any) -> Any:
    """``tree`` with its torch tensors as JAX arrays; other leaves (flags, floats) unchanged."""
    import jax.numpy as jnp

    return optree.tree_map(
        lambda x: jnp.asarray(to_numpy(x)) if isinstance(x, torch.Tensor) else x, tree,
        none_is_leaf=False)


def compare_function_with_optax(
    ours_fn: Callable[..., Any], theirs_fn: Callable[..., Any], args: Sequence[Any],
    kwargs: dict | None = None, dtype: torch.dtype = torch.float32,
    grad_argnums: Sequence[int] = (), rtol: float | None = None, atol: float | None = None,
    jit: bool = True,
) -> None:
    """Calls a function of tensors and its Optax counterpart on the same numbers and compares.

    The outputs are compared leaf by leaf; for each index in ``grad_argnums`` the gradient of
    the sum of the first output with respect to that argument is compared too (torch
    autograd against ``jax.grad``). Tensors in ``args``/``kwargs`` become JAX arrays for
    ``theirs_fn``, anything else is passed as is (static under ``jax.jit``). Runs JAX in 64-bit
    mode for float64. ``jit`` compiles the Optax side once instead of op by op (much faster);
    turn it off for functions that branch on values.
    """
    import jax

    kwargs = kwargs or {}

    def first_sum(out: Any) -> Any:
        return (out[0] if isinstance(out, tuple) else out).sum()

    with jax_precision(dtype):
        theirs_args, theirs_kwargs = _tensors_to_jax((tuple(args), kwargs))
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
        assert_close(ours_fn(*args, **kwargs), theirs_out, dtype, rtol, atol, what="outputs")
        if not grad_argnums:
            return
        leaves = {i: args[i].detach().clone().requires_grad_(True) for i in grad_argnums}
        ours_args = [leaves.get(i, a) for i, a in enumerate(args)]
        ours_grads = torch.autograd.grad(first_sum(ours_fn(*ours_args, **kwargs)),
                                         list(leaves.values()))
        for argnum, ours_grad, theirs_grad in zip(grad_argnums, ours_grads, theirs_grads):
            assert_close(ours_grad, theirs_grad, dtype, rtol, atol,
                         what=f"gradient wrt argument {argnum}")


def seeded_randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0,
                 scale: float = 1.0) -> torch.Tensor:
    """A reproducible standard normal tensor (times ``scale``)."""
    generator = torch.Generator().manual_seed(seed)
    return scale * torch.randn(shape, generator=generator, dtype=dtype)


def seeded_randint(high: int, *shape: int, seed: int = 0,
                   dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """A reproducible tensor of integers in ``[0, high)`` (e.g. class labels)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=generator).to(dtype)
