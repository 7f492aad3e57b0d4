"""Microbatching: evaluate a function on slices of a batch and combine the results.

Mirrors ``optax/microbatching/_microbatching.py``. Where Optax runs the microbatches in a
``lax.fori_loop``, this module runs a Python loop over strided views of the batch; where it uses
``jax.vmap`` and ``jax.value_and_grad``, it uses :mod:`torch.func` behind small adapters that give
them JAX's pytree semantics (``None`` is an empty subtree, keyword arguments are mapped too).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Any, Union

import optree
import torch

from optax_compat._runtime import tree_math as tm
from optax_compat._src import base

AccumulatorTree = Any
Function = Callable[..., Any]
VmapFn = Callable[[Function, Union[int, Sequence[int]], int], Function]
PyTreeFn = Callable[[base.ArrayTree], base.ArrayTree]
UpdateFn = Callable[[base.ArrayTree, base.ArrayTree, int], base.ArrayTree]
IndividualOutputs = collections.namedtuple("Aux", ["values", "metrics", "aux"])
ValueAndGradFn = Callable[..., tuple[Any, IndividualOutputs]]


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """How the results of the microbatches ``[x_0, ..., x_{n-1}]`` are combined.

    The microbatched function computes::

        carry = init(x_0)
        for i in range(n):
            carry = update(carry, x_i, i)
        return finalize(carry)

    Attributes:
      init: ``f(value)`` builds the initial carry from the result of one microbatch (only its
        shape and dtype matter; Optax passes a ``ShapeDtypeStruct``, here a tensor).
      update: ``f(carry, value, index)`` folds the result of microbatch ``index`` into the carry.
      finalize: ``f(carry)`` turns the final carry into the answer.
      aggregate: ``f(per_example_values)`` reduces values with a leading batch axis into one
        value, the way the whole accumulation would (used by :func:`micro_vmap`).
    """

    init: PyTreeFn
    update: UpdateFn
    finalize: PyTreeFn
    aggregate: PyTreeFn


def _with_floating_check(fn: Function) -> Function:
    """Wraps an ``init`` so that it rejects non floating-point values (averages need them)."""

    def checked(value: torch.Tensor) -> Any:
        if not value.dtype.is_floating_point:
            raise ValueError("MEAN and RUNNING_MEAN Accumulators require floating-point values.")
        return fn(value)

    return checked


def _split_batch_axis(x: torch.Tensor, microbatch_size: int, axis: int) -> torch.Tensor:
    # Column-major split: element ``b`` of the batch lands at ``(b % n, b // n)``, so microbatch
    # ``i`` holds the strided rows ``i, i + n, i + 2n, ...`` (a view, nothing is copied).
    axis = axis % x.dim()
    return x.unflatten(axis, (microbatch_size, -1)).transpose(axis, axis + 1)


def reshape_batch_axis(tree: Any, microbatch_size: int, axis: int = 0) -> Any:
    """Splits the batch axis of every leaf into ``(num_microbatches, microbatch_size)``.

    The split is column-major (as ``reshape(..., order='F')``): microbatch ``i`` holds batch
    rows ``i, i + num_microbatches, i + 2 * num_microbatches, ...``. The result is a view of
    each leaf.

    Args:
      tree: a pytree of tensors, each having a batch axis.
      microbatch_size: the size of each microbatch; it must divide the batch size.
      axis: the batch axis.

    Returns:
      The pytree of reshaped tensors, with the two new axes at the position of ``axis``.
    """
    return tm.tree_map(lambda x: _split_batch_axis(x, microbatch_size, axis), tree)


def _lift(accumulator: Accumulator) -> Accumulator:
    """Turns an accumulator of tensors into one of pytrees (applied leaf by leaf)."""
    return Accumulator(
        lambda value: tm.tree_map(accumulator.init, value),
        lambda carry, value, index: tm.tree_map(
            lambda c, v: accumulator.update(c, v, index), carry, value),
        lambda carry: tm.tree_map(accumulator.finalize, carry),
        lambda values: tm.tree_map(accumulator.aggregate, values),
    )


def _compose(accumulators: AccumulatorTree) -> Accumulator:
    """One accumulator from a pytree of accumulators, a prefix of the function's outputs."""

    def over_prefix(fn: Callable[..., Any], *trees: Any) -> Any:
        return tm.map_over_prefix(fn, accumulators, *trees, what="accumulator")

    return Accumulator(
        lambda values: over_prefix(lambda acc, value: acc.init(value), values),
        lambda carry, values, index: over_prefix(
            lambda acc, c, value: acc.update(c, value, index), carry, values),
        lambda carry: over_prefix(lambda acc, c: acc.finalize(c), carry),
        lambda values: over_prefix(lambda acc, value: acc.aggregate(value), values),
    )


def _mean_over_batch(x: torch.Tensor) -> torch.Tensor:
    # ``jnp.mean`` of integers is a float; ``torch.mean`` refuses them.
    if not (x.is_floating_point() or x.is_complex()):
        x = x.to(torch.get_default_dtype())
    return x.mean(dim=0)


def _sum() -> Accumulator:
    """Sums the microbatch results."""
    return _lift(Accumulator(
        init=torch.zeros_like,
        update=lambda carry, value, _: carry + value,
        finalize=lambda carry: carry,
        aggregate=lambda values: values.sum(dim=0),
    ))


def _check_positive(num_microbatches: int) -> None:
    if num_microbatches <= 0:
        raise ValueError(f"num_microbatches={num_microbatches} must be positive.")


def _mean(num_microbatches: int) -> Accumulator:
    """Averages the microbatch results over ``num_microbatches``."""
    _check_positive(num_microbatches)
    return _lift(Accumulator(
        init=_with_floating_check(torch.zeros_like),
        update=lambda carry, value, _: carry + value,
        finalize=lambda carry: carry / num_microbatches,
        aggregate=_mean_over_batch,
    ))


def _running_mean_update(carry: torch.Tensor, value: torch.Tensor, index: int) -> torch.Tensor:
    weight = index / (index + 1)
    return carry * weight + value * (1 - weight)


def _running_mean() -> Accumulator:
    """Averages the results of the microbatches that actually ran."""
    return _lift(Accumulator(
        init=_with_floating_check(torch.zeros_like),
        update=_running_mean_update,
        finalize=lambda carry: carry,
        aggregate=_mean_over_batch,
    ))


def _concat(num_microbatches: int) -> Accumulator:
    """Concatenates the microbatch results along axis 0, in the order of the original batch."""
    _check_positive(num_microbatches)

    def init(value: torch.Tensor) -> torch.Tensor:
        return value.new_zeros((num_microbatches, *value.shape))

    def update(carry: torch.Tensor, value: torch.Tensor, index: int) -> torch.Tensor:
        # Out of place (``carry.at[index].set``), so that autograd and torch.func transforms
        # around the microbatched function see a pure computation.
        return torch.select_scatter(carry, value.to(carry.dtype), 0, index)

    def finalize(carry: torch.Tensor) -> torch.Tensor:
        # Undo the column-major split: row ``j`` of microbatch ``i`` was batch row ``i + n*j``.
        if carry.dim() < 2:
            return carry
        return carry.transpose(0, 1).reshape(-1, *carry.shape[2:])

    return _lift(Accumulator(init, update, finalize, lambda values: values))


class AccumulationType(enum.Enum):
    """The type of accumulation to perform."""

    MEAN = enum.auto()
    """Average the microbatch outputs."""
    SUM = enum.auto()
    """Sum the microbatch outputs."""
    RUNNING_MEAN = enum.auto()
    """Average the microbatch outputs over ``num_real_microbatches``."""
    CONCAT = enum.auto()
    """Concatenate the microbatch outputs along axis 0."""


def _canonicalize(tree: Accumulator | AccumulationType | AccumulatorTree,
                  num_microbatches: int) -> Accumulator:
    """Builds one accumulator from a pytree of Accumulators and AccumulationTypes."""

    def build(acc: Any) -> Accumulator:
        if isinstance(acc, Accumulator):
            return acc
        if acc is AccumulationType.MEAN:
            return _mean(num_microbatches)
        if acc is AccumulationType.SUM:
            return _sum()
        if acc is AccumulationType.RUNNING_MEAN:
            return _running_mean()
        if acc is AccumulationType.CONCAT:
            return _concat(num_microbatches)
        raise ValueError(f"Unknown accumulator: {acc}")

    return _compose(tm.tree_map(build, tree))


def _leaf_sizes(axis: int, subtree: Any) -> list[int]:
    return [x.shape[axis] for x in tm.leaves(subtree)]


def _reshape_all_args(
    microbatch_size: int,
    argnums: Sequence[int],
    argnames: Sequence[str],
    in_axes: Sequence[int],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any], int]:
    """Splits the batch axis of every batch argument into (num_microbatches, microbatch_size)."""
    if len(in_axes) != len(argnums) + len(argnames):
        raise ValueError(
            f"in_axes={tuple(in_axes)} must give one axis per batch argument "
            f"(argnums={tuple(argnums)}, argnames={tuple(argnames)}).")
    missing = [name for name in argnames if name not in kwargs]
    if missing:
        raise ValueError(f"Batch keyword arguments {missing} (from argnames) were not passed.")
    batch_args = [args[i] for i in argnums] + [kwargs[name] for name in argnames]
    batch_sizes = [size for axis, arg in zip(in_axes, batch_args)
                   for size in _leaf_sizes(axis, arg)]
    if not batch_sizes:
        raise ValueError("microbatch needs at least one tensor with a batch axis in the "
                         "arguments named by argnums/argnames.")
    if len(set(batch_sizes)) > 1:
        raise ValueError(
            f"Batch Arguments must have equal-size batch axes, found {batch_sizes}.")
    batch_size = batch_sizes[0]
    if batch_size % microbatch_size != 0:
        raise ValueError(
            f"batch_size={batch_size} must be divisible by microbatch_size={microbatch_size}.")

    new_args, new_kwargs = list(args), dict(kwargs)
    for i, axis in zip(argnums, in_axes):
        new_args[i] = reshape_batch_axis(args[i], microbatch_size, axis)
    for name, axis in zip(argnames, in_axes[len(argnums):]):
        new_kwargs[name] = reshape_batch_axis(kwargs[name], microbatch_size, axis)
    return tuple(new_args), new_kwargs, batch_size


def _as_loop_bound(num_real_microbatches: int | torch.Tensor | None,
                   num_microbatches: int) -> int:
    if num_real_microbatches is None:
        return num_microbatches
    # A data-dependent trip count: the loop is Python's, so the bound is read on the host.
    bound = int(num_real_microbatches)
    if not 0 <= bound <= num_microbatches:
        raise ValueError(f"num_real_microbatches={bound} must be between 0 and the number of "
                         f"microbatches, {num_microbatches}.")
    return bound


def microbatch(
    fun: Function,
    argnums: int | Sequence[int],
    microbatch_size: int | None,
    accumulator: Accumulator | AccumulationType | AccumulatorTree = AccumulationType.SUM,
    *,
    argnames: str | Sequence[str] = (),
    in_axes: int | Sequence[int] = 0,
    num_real_microbatches: int | torch.Tensor | None = None,
) -> Function:
    """A general microbatching transformation.

    The returned function splits the batch arguments into microbatches, evaluates ``fun`` on
    each one in turn and combines the results with ``accumulator``; for ``SUM`` it computes::

        total = 0
        for microbatch in full_batch:
            total += fun(microbatch)

    Peak memory is that of one microbatch, which helps when ``fun`` on the full batch does not
    fit in device memory. Microbatch ``i`` holds the batch rows ``i, i + n, i + 2n, ...`` where
    ``n`` is the number of microbatches (see :func:`reshape_batch_axis`); ``CONCAT`` restores
    the original order.

    Example:
      >>> fun = lambda x: (x + 1, torch.sum(3 * x))
      >>> strategy = (AccumulationType.CONCAT, AccumulationType.SUM)
      >>> microbatch(fun, argnums=0, microbatch_size=2, accumulator=strategy)(
      ...     torch.tensor([1, 2, 3, 4]))
      (tensor([2, 3, 4, 5]), tensor(30))

    Args:
      fun: an arbitrary function.
      argnums: the indices of the positional arguments that have a batch axis.
      microbatch_size: the number of batch rows in each microbatch; it must divide the batch
        size. ``None`` returns ``fun`` unchanged.
      accumulator: how to combine the microbatch results: an :class:`Accumulator`, an
        :class:`AccumulationType`, or a pytree of them that is a prefix of ``fun``'s output.
      argnames: the names of the keyword arguments that have a batch axis.
      in_axes: the batch axis of each argument in ``argnums + argnames`` (an int for all).
      num_real_microbatches: if given, only the first this many microbatches are evaluated
        (early stopping); accumulators see only those.

    Returns:
      A function with the arguments of ``fun`` that evaluates it once per microbatch.
    """
    if microbatch_size is None:
        return fun
    if isinstance(argnums, int):
        argnums = (argnums,)
    if isinstance(argnames, str):
        argnames = (argnames,)
    if isinstance(in_axes, int):
        in_axes = (in_axes,) * (len(argnums) + len(argnames))
    argnums, argnames, in_axes = tuple(argnums), tuple(argnames), tuple(in_axes)

    def microbatched_fun(*args: Any, **kwargs: Any) -> Any:
        reshaped_args, reshaped_kwargs, batch_size = _reshape_all_args(
            microbatch_size, argnums, argnames, in_axes, args, kwargs)
        num_microbatches = batch_size // microbatch_size
        accumulator_ = _canonicalize(accumulator, num_microbatches)

        def select(tree: Any, axis: int, index: int) -> Any:
            return tm.tree_map(lambda x: x.select(axis % (x.dim() - 1), index), tree)

        def evaluate(index: int) -> Any:
            input_args, input_kwargs = list(reshaped_args), dict(reshaped_kwargs)
            for i, axis in zip(argnums, in_axes):
                input_args[i] = select(input_args[i], axis, index)
            for name, axis in zip(argnames, in_axes[len(argnums):]):
                input_kwargs[name] = select(input_kwargs[name], axis, index)
            return fun(*input_args, **input_kwargs)

        loop_bound = _as_loop_bound(num_real_microbatches, num_microbatches)
        # Optax takes the carry's shapes from ``jax.eval_shape``; here the first microbatch
        # provides them, and is evaluated only once.
        first = evaluate(0)
        carry = accumulator_.init(first)
        for index in range(loop_bound):
            carry = accumulator_.update(carry, first if index == 0 else evaluate(index), index)
        return accumulator_.finalize(carry)

    return microbatched_fun


def _axes_per_leaf(axes: Any, arg: Any) -> list[int | None]:
    """Broadcasts a vmap axis spec (an int, None, or a prefix tree) over the leaves of ``arg``."""
    if axes is None or isinstance(axes, int):
        return [axes] * len(tm.leaves(arg))
    per_subtree = optree.tree_map(
        lambda axis, subtree: _axes_per_leaf(axis, subtree), axes, arg,
        is_leaf=lambda node: node is None, none_is_leaf=False, namespace=tm.NAMESPACE)
    groups = optree.tree_leaves(per_subtree, is_leaf=lambda node: isinstance(node, list),
                                none_is_leaf=False, namespace=tm.NAMESPACE)
    return [axis for group in groups for axis in group]


def _pytree_vmap(fun: Function, in_axes: Any = 0, out_axes: int = 0) -> Function:
    """``torch.func.vmap`` with ``jax.vmap``'s pytree semantics.

    Arguments and outputs are flattened with this package's pytree conventions (``None`` is an
    empty subtree, registered classes are traversed), and keyword arguments are mapped over
    their leading axis, as ``jax.vmap`` does.

    Args:
      fun: the function to map.
      in_axes: an int or None for every positional argument, or a tuple (list) with one entry
        per positional argument, each an int, None or a prefix tree of axes.
      out_axes: the output axis of every output leaf.

    Returns:
      The mapped function.
    """

    def mapped(*args: Any, **kwargs: Any) -> Any:
        axes = tuple(in_axes) if isinstance(in_axes, list) else in_axes
        if not isinstance(axes, tuple):
            axes = (axes,) * len(args)
        if len(axes) != len(args):
            raise ValueError(f"vmap in_axes={axes} must have one entry per positional argument "
                             f"({len(args)} given).")
        leaf_axes = [axis for spec, arg in zip(axes, args) for axis in _axes_per_leaf(spec, arg)]
        leaf_axes += [0] * len(tm.leaves(kwargs))
        leaves, spec = tm.flatten((args, kwargs))
        output_spec = []

        def flat_fun(*flat_leaves: Any) -> tuple[torch.Tensor, ...]:
            inner_args, inner_kwargs = tm.unflatten(spec, flat_leaves)
            output_leaves, output_treespec = tm.flatten(fun(*inner_args, **inner_kwargs))
            output_spec.append(output_treespec)
            return tuple(output_leaves)

        outputs = torch.func.vmap(flat_fun, in_dims=tuple(leaf_axes), out_dims=out_axes)(*leaves)
        return tm.unflatten(output_spec[-1], outputs)

    return mapped


def micro_vmap(
    fun: Function,
    in_axes: int | Sequence[int] = 0,
    out_axes: Any = 0,
    *,
    microbatch_size: int | None = None,
    vmap_fn: VmapFn = _pytree_vmap,
    accumulator: Accumulator | AccumulationType | AccumulatorTree = AccumulationType.CONCAT,
    num_real_microbatches: int | torch.Tensor | None = None,
) -> Function:
    """``vmap`` with microbatching: maps ``fun`` over a batch axis, a microbatch at a time.

    Each microbatch is vectorized with ``vmap_fn``; microbatches run one after another, so the
    batch can be much larger than what one vectorized call fits in memory. With the default
    ``CONCAT`` accumulator the result is that of ``vmap``; ``SUM`` or ``MEAN`` reduce over the
    batch axis without ever holding the per-example outputs of the whole batch.

    Example:
      >>> micro_vmap(lambda x: x ** 2, microbatch_size=4)(torch.arange(8))
      tensor([ 0,  1,  4,  9, 16, 25, 36, 49])

    Args:
      fun: the function to map.
      in_axes: the mapped axis of each positional argument (an int: one positional argument);
        None for arguments that are not mapped. Keyword arguments are mapped over axis 0.
      out_axes: must be 0.
      microbatch_size: the number of batch rows per microbatch; it must divide the batch size.
        ``None`` maps the whole batch at once.
      vmap_fn: a function with the signature of ``jax.vmap`` (``(fun, in_axes, out_axes)``);
        the default is :func:`torch.func.vmap` with JAX's pytree and keyword semantics.
      accumulator: what to do with the mapped outputs (a pytree prefix of the outputs):
        ``CONCAT`` keeps the batch axis, ``SUM``/``MEAN`` reduce over it.
      num_real_microbatches: if given, only the first this many microbatches are evaluated.

    Returns:
      A function with the arguments of ``fun``, each mapped argument having a batch axis.

    Raises:
      NotImplementedError: if ``out_axes`` is not 0.
    """
    if out_axes != 0:
        raise NotImplementedError("out_axis != 0 is not currently supported")
    if isinstance(in_axes, int):
        in_axes = (in_axes,)
    in_axes = tuple(in_axes)

    # vmap maps every keyword argument over axis 0: they travel as one dict argument, "kwargs".
    def vmap_reduce_fn(*args: Any, kwargs: dict[str, Any]) -> Any:
        output = vmap_fn(fun, in_axes, out_axes)(*args, **kwargs)
        microbatch_size_ = tm.leaves(output)[0].shape[0]
        # Only ``aggregate`` is used, which does not depend on the number of microbatches.
        return _canonicalize(accumulator, microbatch_size_).aggregate(output)

    micro_vmap_fn = microbatch(
        vmap_reduce_fn,
        argnums=tuple(i for i, axis in enumerate(in_axes) if axis is not None),
        argnames="kwargs",
        microbatch_size=microbatch_size,
        accumulator=accumulator,
        in_axes=(*(axis for axis in in_axes if axis is not None), 0),
        num_real_microbatches=num_real_microbatches,
    )

    def wrapped_fn(*args: Any, **kwargs: Any) -> Any:
        return micro_vmap_fn(*args, kwargs=kwargs)

    return wrapped_fn


def _normalize_fun_to_return_aux(fun: Function, has_aux: bool) -> Function:
    if has_aux:
        return fun
    return lambda *args, **kwargs: (fun(*args, **kwargs), None)


def _as_differentiable_leaf(x: Any) -> Any:
    # ``jax.grad`` accepts Python floats; ``torch.func.grad`` needs tensors.
    return torch.as_tensor(x) if isinstance(x, float) else x


def _as_differentiable_leaf_tree(tree: Any) -> Any:
    return tm.tree_map(_as_differentiable_leaf, tree)


def _value_and_grad(fun: Function, argnums: int | Sequence[int]) -> Function:
    """``jax.value_and_grad(fun, argnums, has_aux=True)`` on :func:`torch.func.grad_and_value`.

    The differentiated arguments and the auxiliary output are flattened with this package's
    pytree conventions, so they may hold ``None`` subtrees and registered classes.
    """
    positions = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def value_and_grad_fn(*args: Any, **kwargs: Any) -> tuple[tuple[Any, Any], Any]:
        leaves, spec = tm.flatten(tuple(_as_differentiable_leaf_tree(args[i]) for i in positions))
        aux_spec = []

        def of_leaves(flat_leaves: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, Any]:
            full_args = list(args)
            for position, arg in zip(positions, tm.unflatten(spec, flat_leaves)):
                full_args[position] = arg
            value, aux = fun(*full_args, **kwargs)
            aux_leaves, aux_treespec = tm.flatten(aux)
            aux_spec.append(aux_treespec)
            return value, (value, tuple(aux_leaves))

        grads, (value, aux_leaves) = torch.func.grad(of_leaves, has_aux=True)(tuple(leaves))
        grads = tm.unflatten(spec, grads)
        if isinstance(argnums, int):
            grads = grads[0]
        return (value, tm.unflatten(aux_spec[-1], aux_leaves)), grads

    return value_and_grad_fn


def _with_extra_batch_axis(fun: Function, batch_argnums: Sequence[int]) -> Function:
    """Wraps ``fun`` so that every leaf of the batch arguments gets a size-1 axis 1."""

    def wrapped_fun(*args: Any, **kwargs: Any) -> Any:
        args_with_group_axis = list(args)
        for i in batch_argnums:
            args_with_group_axis[i] = tm.tree_map(lambda x: x.unsqueeze(1), args[i])
        return fun(*args_with_group_axis, **kwargs)

    return wrapped_fun


def micro_grad(
    fun: Function,
    has_aux: bool = False,
    argnums: int | Sequence[int] = 0,
    *,
    batch_argnums: int | Sequence[int] = 1,
    keep_batch_dim: bool = True,
    microbatch_size: int | None = None,
    accumulator: Accumulator | AccumulationType | AccumulatorTree = AccumulationType.SUM,
    transform_fn: Callable[[base.ArrayTree], base.ArrayTree] = lambda x: x,
    metrics_fn: Callable[[base.ArrayTree], base.ArrayTree] = lambda x: None,
    num_real_microbatches: int | torch.Tensor | None = None,
) -> ValueAndGradFn:
    """Per-example gradients, transformed and combined over the batch, with microbatching.

    Like ``value_and_grad``, but the gradient is taken for each example of the batch on its
    own; ``transform_fn`` is applied to each per-example gradient (e.g. clipping, or returning
    ``(g, g ** 2)`` for second moments) and the results are combined with ``accumulator``
    (a sum by default). ``metrics_fn`` computes low-dimensional per-example statistics of the
    raw gradients. See https://arxiv.org/abs/2510.00236.

    Example:
      >>> def loss(params, features, targets):
      ...     return 0.5 * torch.mean((features @ params - targets) ** 2)
      >>> (grads, squared), aux = micro_grad(
      ...     loss, argnums=0, batch_argnums=(1, 2), accumulator=AccumulationType.MEAN,
      ...     transform_fn=lambda g: (g, g ** 2), metrics_fn=torch.linalg.norm,
      ... )(torch.zeros(1), torch.ones(4, 1), torch.tensor([0.0, 2.0, 4.0, 6.0]))
      >>> grads, squared  # the per-example gradients are -0, -2, -4, -6
      (tensor([-3.]), tensor([14.]))

    Args:
      fun: the function to differentiate, ``fun(params, batch, ...)`` by default.
      has_aux: whether ``fun`` returns ``(value, aux)``.
      argnums: the argument(s) to differentiate with respect to.
      batch_argnums: the argument(s) with a batch axis (axis 0).
      keep_batch_dim: whether ``fun`` expects its batch arguments to keep a (size 1) batch axis.
      microbatch_size: the number of examples per microbatch (see :func:`microbatch`).
      accumulator: how to combine the transformed per-example gradients over the batch.
      transform_fn: applied to each per-example gradient before they are combined.
      metrics_fn: applied to each per-example gradient; returned per example in the aux.
      num_real_microbatches: if given, only the first this many microbatches are evaluated.

    Returns:
      A function with the arguments of ``fun`` returning ``(combined, aux)`` where ``aux`` is a
      namedtuple ``(values, metrics, aux)`` of per-example values, metrics and ``fun``'s aux.
    """
    if isinstance(batch_argnums, int):
        batch_argnums = (batch_argnums,)
    value_and_grad_fn = _value_and_grad(_normalize_fun_to_return_aux(fun, has_aux), argnums)

    def grad_fn(*args: Any, **kwargs: Any) -> tuple[Any, IndividualOutputs]:
        (value, aux), grad = value_and_grad_fn(*args, **kwargs)
        return transform_fn(grad), IndividualOutputs(values=value, metrics=metrics_fn(grad),
                                                     aux=aux)

    in_axes = [None] * (max(batch_argnums) + 1)
    for i in batch_argnums:
        in_axes[i] = 0
    micro_fun = micro_vmap(
        grad_fn,
        in_axes=in_axes,
        accumulator=(accumulator, AccumulationType.CONCAT),
        microbatch_size=microbatch_size,
        num_real_microbatches=num_real_microbatches,
    )
    if keep_batch_dim:
        micro_fun = _with_extra_batch_axis(micro_fun, batch_argnums)
    return micro_fun
