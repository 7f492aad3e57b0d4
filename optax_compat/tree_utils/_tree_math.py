"""Arithmetic on pytrees (mirrors ``optax/tree_utils/_tree_math.py``).

Each function flattens its trees once and does the arithmetic with one ``torch._foreach_*``
call per operation through :mod:`optax_compat._runtime.tree_math`.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm

Scalar = Union[float, int, torch.Tensor]


def _binary(op, tree_x: Any, tree_y: Any, name: str) -> Any:
    xs, spec = tm.flatten(tree_x)
    ys = tm.leaves_like(tree_y, spec, name, reference=tree_x)
    return tm.unflatten(spec, op(xs, ys))


def tree_add(tree_x: Any, tree_y: Any, *other_trees: Any) -> Any:
    """Sum of two or more trees, leaf by leaf.

    Args:
      tree_x: first tree.
      tree_y: second tree.
      *other_trees: more trees to add.

    Returns:
      A tree with the structure of ``tree_x``.
    """
    xs, spec = tm.flatten(tree_x)
    total = tm.add(xs, tm.leaves_like(tree_y, spec, "tree_y", reference=tree_x))
    for other in other_trees:
        total = tm.add(total, tm.leaves_like(other, spec, "other_trees", reference=tree_x))
    return tm.unflatten(spec, total)


def tree_sub(tree_x: Any, tree_y: Any) -> Any:
    """``tree_x - tree_y``, leaf by leaf."""
    return _binary(tm.sub, tree_x, tree_y, "tree_y")


def tree_mul(tree_x: Any, tree_y: Any) -> Any:
    """``tree_x * tree_y``, leaf by leaf."""
    return _binary(tm.mul, tree_x, tree_y, "tree_y")


def tree_div(tree_x: Any, tree_y: Any) -> Any:
    """``tree_x / tree_y``, leaf by leaf."""
    return _binary(tm.div, tree_x, tree_y, "tree_y")


def tree_scale(scalar: Scalar, tree: Any) -> Any:
    """``scalar * tree``.

    Args:
      scalar: a number or a 0-d tensor (which may require grad).
      tree: a tree of tensors.

    Returns:
      The scaled tree.
    """
    xs, spec = tm.flatten(tree)
    return tm.unflatten(spec, tm.mul(xs, scalar))


def tree_add_scale(tree_x: Any, scalar: Scalar, tree_y: Any) -> Any:
    """``tree_x + scalar * tree_y`` in one pass.

    Args:
      tree_x: first tree.
      scalar: a number or a 0-d tensor.
      tree_y: second tree, with the structure of ``tree_x``.

    Returns:
      A tree with the structure of ``tree_x``.
    """
    xs, spec = tm.flatten(tree_x)
    ys = tm.leaves_like(tree_y, spec, "tree_y", reference=tree_x)
    return tm.unflatten(spec, tm.add_scaled(xs, scalar, ys))


def tree_vdot(tree_x: Any, tree_y: Any) -> torch.Tensor:
    """Inner product ``sum(conj(x) * y)`` over all leaves, as a 0-d tensor."""
    xs, spec = tm.flatten(tree_x)
    ys = tm.leaves_like(tree_y, spec, "tree_y", reference=tree_x)
    if not xs:
        return torch.tensor(0)
    return tm.vdot(xs, ys)


def tree_sum(tree: Any, associative_reduction: bool = False) -> torch.Tensor:
    """Sum of all elements of all leaves.

    Args:
      tree: a tree of tensors.
      associative_reduction: accepted for Optax compatibility; the sum is computed in one
        stacked reduction either way.

    Returns:
      A 0-d tensor (``0`` for an empty tree).
    """
    del associative_reduction
    xs = tm.leaves(tree)
    if not xs:
        return torch.tensor(0)
    return tm.sum_scalars([x.sum() for x in xs])


def _extremum(tree: Any, reduce, combine, empty: float) -> torch.Tensor:
    values = [reduce(x) for x in tm.leaves(tree) if x.numel() > 0]
    if not values:
        return torch.tensor(empty)
    result = values[0]
    for value in values[1:]:
        result = combine(result, value)
    return result


def tree_max(tree: Any) -> torch.Tensor:
    """Largest element over all leaves (``-inf`` for an empty tree)."""
    return _extremum(tree, torch.max, torch.maximum, -math.inf)


def tree_min(tree: Any) -> torch.Tensor:
    """Smallest element over all leaves (``inf`` for an empty tree)."""
    return _extremum(tree, torch.min, torch.minimum, math.inf)


def tree_size(tree: Any) -> int:
    """Total number of elements in the tree."""
    return sum(x.numel() if isinstance(x, torch.Tensor) else 1 for x in tm.leaves(tree))


def tree_conj(tree: Any) -> Any:
    """Complex conjugate of every leaf."""
    return tm.tree_map(lambda x: x.conj().resolve_conj() if x.is_complex() else x, tree)


def tree_real(tree: Any) -> Any:
    """Real part of every leaf."""
    return tm.tree_map(lambda x: x.real if x.is_complex() else x, tree)


def tree_norm(tree: Any, ord: Optional[Union[int, str, float]] = None,
              squared: bool = False) -> torch.Tensor:
    """Vector norm of the whole tree seen as one flat vector.

    Args:
      tree: a tree of tensors.
      ord: ``None`` or ``2`` (Euclidean), ``1``, or ``inf`` / ``'inf'`` / ``'infinity'``.
      squared: return the squared norm.

    Returns:
      A 0-d tensor.

    Raises:
      ValueError: for another ``ord``.
    """
    xs = tm.leaves(tree)
    if ord is None or ord == 2:
        sq_norm = tm.sum_of_squares(xs)
        return sq_norm if squared else torch.sqrt(sq_norm)
    if ord == 1:
        norm = tree_sum(tm.abs(xs))
    elif ord == math.inf or ord in ("inf", "infinity"):
        norm = tree_max(tm.abs(xs))
    else:
        raise ValueError(f"Unsupported ord: {ord}")
    return norm * norm if squared else norm


def tree_batch_shape(tree: Any, shape: tuple[int, ...] = ()) -> Any:
    """Broadcasts every leaf to ``(*shape, *leaf.shape)``."""
    return tm.tree_map(lambda x: torch.broadcast_to(x, (*shape, *x.shape)), tree)


def tree_zeros_like(tree: Any, dtype: Optional[torch.dtype] = None) -> Any:
    """A tree of zeros with the structure, shapes (and dtypes unless given) of ``tree``."""
    dtype = bb.canonical_dtype(dtype)
    return tm.tree_map(lambda x: torch.zeros_like(x, dtype=dtype), tree)


def tree_ones_like(tree: Any, dtype: Optional[torch.dtype] = None) -> Any:
    """A tree of ones with the structure, shapes (and dtypes unless given) of ``tree``."""
    dtype = bb.canonical_dtype(dtype)
    return tm.tree_map(lambda x: torch.ones_like(x, dtype=dtype), tree)


def tree_full_like(tree: Any, fill_value: Scalar, dtype: Optional[torch.dtype] = None) -> Any:
    """A tree filled with ``fill_value``, with the structure and shapes of ``tree``."""
    dtype = bb.canonical_dtype(dtype)
    return tm.tree_map(lambda x: torch.full_like(x, fill_value, dtype=dtype), tree)


def tree_clip(tree: Any, min_value: Optional[Scalar] = None,
              max_value: Optional[Scalar] = None) -> Any:
    """Clips every leaf to ``[min_value, max_value]`` (either bound may be ``None``)."""
    xs, spec = tm.flatten(tree)
    if min_value is not None:
        xs = tm.maximum(xs, min_value)
    if max_value is not None:
        xs = tm.minimum(xs, max_value)
    return tm.unflatten(spec, xs)


def tree_update_moment(updates: Any, moments: Any, decay: Scalar, order: int) -> Any:
    """Exponential moving average of the ``order``-th power of the updates.

    Returns ``(1 - decay) * updates ** order + decay * moments``, leaf by leaf.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> grads = {"w": torch.tensor([1.0, -2.0])}
      >>> mu = {"w": torch.zeros(2)}
      >>> optax.update_moment(grads, mu, decay=0.9, order=2)["w"]
      tensor([0.1000, 0.4000])
    """
    gs, spec = tm.flatten(updates)
    ms = tm.leaves_like(moments, spec, "moments", reference=updates)
    return tm.unflatten(spec, bb.moving_average(ms, tm.power(gs, order), decay))


def tree_update_infinity_moment(updates: Any, moments: Any, decay: Scalar, eps: Scalar) -> Any:
    """Exponentially weighted infinity norm: ``max(|updates| + eps, decay * moments)``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> grads = {"w": torch.tensor([1.0, -2.0])}
      >>> nu = {"w": torch.tensor([1.5, 1.5])}
      >>> optax.update_infinity_moment(grads, nu, decay=0.9, eps=0.0)["w"]
      tensor([1.3500, 2.0000])
    """
    gs, spec = tm.flatten(updates)
    ms = tm.leaves_like(moments, spec, "moments", reference=updates)
    return tm.unflatten(spec, tm.maximum(tm.add(tm.abs(gs), eps), tm.mul(ms, decay)))


def tree_update_moment_per_elem_norm(updates: Any, moments: Any, decay: Scalar,
                                     order: int) -> Any:
    """EMA of the ``order``-th power of the elementwise modulus (complex-safe moments).

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> grads = {"w": torch.tensor([3.0 + 4.0j])}
      >>> nu = {"w": torch.zeros(1)}
      >>> optax.update_moment_per_elem_norm(grads, nu, decay=0.9, order=2)["w"]
      tensor([2.5000])
    """
    gs, spec = tm.flatten(updates)
    ms = tm.leaves_like(moments, spec, "moments", reference=updates)
    if any(g.is_complex() for g in gs):
        half = order / 2
        half = int(half) if float(half).is_integer() else half
        powered = [tm.power([(g.conj() * g).real], half)[0] if g.is_complex()
                   else tm.power([g], order)[0] for g in gs]
    else:
        powered = tm.power(gs, order)
    return tm.unflatten(spec, bb.moving_average(ms, powered, decay))


def tree_bias_correction(moment: Any, decay: Scalar, count: Union[int, torch.Tensor]) -> Any:
    """Divides ``moment`` by ``1 - decay ** count`` (Adam's bias correction).

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> moment = {"w": torch.tensor([0.1, -0.2])}  # after one step with decay 0.9
      >>> optax.bias_correction(moment, decay=0.9, count=1)["w"]
      tensor([ 1.0000, -2.0000])
    """
    xs, spec = tm.flatten(moment)
    if not xs:
        return moment
    return tm.unflatten(spec, tm.div(xs, bias_correction_factor(xs, decay, count)))


def bias_correction_factor(xs: list[torch.Tensor], decay: Scalar,
                           count: Union[int, torch.Tensor]) -> torch.Tensor:
    """``1 - decay ** count``, the divisor of :func:`tree_bias_correction` for the leaves ``xs``.

    In the widest precision among the leaves, as JAX does for a weakly typed ``decay``; a 0-d
    tensor does not promote the leaves it divides.
    """
    dtype = tm.widest_real_dtype(xs)
    return 1 - decay ** torch.as_tensor(count, device=xs[0].device).to(dtype)


def tree_where(condition: Union[bool, torch.Tensor], tree_x: Any, tree_y: Any) -> Any:
    """``tree_x`` where ``condition`` holds, else ``tree_y`` (no host synchronisation)."""
    xs, spec = tm.flatten(tree_x)
    ys = tm.leaves_like(tree_y, spec, "tree_y", reference=tree_x)
    return tm.unflatten(spec, tm.where(condition, xs, ys))


def tree_allclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
                  equal_nan: bool = False) -> bool:
    """Whether two trees have the same structure and all leaves are close."""
    xs, spec = tm.flatten(a)
    ys = tm.leaves_like(b, spec, "b", reference=a)
    return all(torch.allclose(torch.as_tensor(x), torch.as_tensor(y), rtol=rtol, atol=atol,
                              equal_nan=equal_nan) for x, y in zip(xs, ys))
