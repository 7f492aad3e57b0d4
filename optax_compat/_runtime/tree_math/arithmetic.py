"""The hot path: arithmetic over the leaves of pytrees with ``torch._foreach_*``.

Optax writes its transforms leaf by leaf (``jax.tree.map(lambda g, m: ...)``) and lets XLA fuse
the result. Eager PyTorch does not fuse, so a Python call per leaf per operation dominates the
step time. Every transform in this package therefore flattens its trees once with optree, does
its arithmetic on *lists of leaves* through the functions below (one ``torch._foreach_*`` call
per operation for the whole tree), and unflattens once at the end.

Conventions:

* Pytrees are optree's with ``None`` not a leaf (Optax's convention) and sorted dict keys.
* Functions without a trailing underscore are pure: they return new tensors and never write
  into their arguments; those ending in ``_`` write into their first argument (in-place paths).
* A "scalar" may be a Python number, a 0-d tensor (a schedule value, a hyperparameter that
  requires grad for meta-learning) or a list with one value per leaf. A scalar never promotes
  the dtype of the leaves it meets: it is rounded to each leaf's dtype (:func:`scalar_like`,
  :func:`_operand`), the one weak-type rule of :mod:`optax_compat._runtime.dtypes`; arithmetic
  between scalars runs in the scalars' own dtypes first (as JAX computes on them).

This module holds the kernels (:func:`foreach`, leaf by leaf under ``vmap``), scalar operands
and dtypes, the elementwise arithmetic with each pure function followed by its in-place twin
(``add`` then ``add_``; a twin runs the same kernels, so both paths give bit-identical numbers),
buffers and blocks for in-place steps, then reductions (sums, inner products,
norms, one scalar per leaf). Flattening and structure checks are in :mod:`.trees`, DTensor
leaves and the flat vector of all leaves in :mod:`.distributed`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Union

import torch

from optax_compat._runtime.dtypes import as_weak, default_float
from optax_compat._runtime.numbers import is_one
from optax_compat._runtime.tree_math.distributed import is_distributed
from optax_compat._runtime.tree_math.trees import (
    PLAIN_TENSOR_TYPES,
    Leaves,
    attributes,
)

Scalar = Union[float, int, torch.Tensor]
ScalarOrLeaves = Union[Scalar, Sequence[torch.Tensor]]

_OWN_PRECISION_DTYPES = frozenset({torch.float32, torch.float64})
_REDUCED_PRECISION_DTYPES = frozenset({torch.bfloat16, torch.float16})
# ``dtype.to_real()``, which Dynamo cannot trace.
_REAL_OF_COMPLEX = {torch.complex32: torch.float16, torch.complex64: torch.float32,
                    torch.complex128: torch.float64}


# ----------------------------------------------------------------------------------------------
# Kernels.


def foreach(op: str, *args: Any, **kwargs: Any) -> Any:
    """``torch._foreach_<op>(*args, **kwargs)``, or the same op leaf by leaf under ``vmap``.

    ``torch._foreach_*`` kernels have no batching rule, so under ``torch.func.vmap`` (Optax's
    ``jax.vmap(tx.update)``, or :func:`optax_compat.fused_step` stacking leaves of one shape)
    each leaf runs the op on its own: the same arithmetic, one kernel per (batched) leaf. The
    check reads the first tensor of each list argument, so it costs nothing measurable.
    """
    for arg in args:
        if isinstance(arg, (list, tuple)) and is_batched(arg):
            return _leaf_by_leaf(op, args, kwargs)
    return getattr(torch, "_foreach_" + op)(*args, **kwargs)


def is_batched(xs: Sequence[Any]) -> bool:
    """Whether the leaves run under ``torch.func.vmap`` (read on the first one)."""
    # ``len``, not ``bool(xs)``: Dynamo in torch 2.11 cannot trace ``bool`` of a list.
    return len(xs) > 0 and isinstance(xs[0], torch.Tensor) and _is_batched_tensor(xs[0])


_is_batched_tensor = torch._C._functorch.is_batchedtensor


def _leaf_by_leaf(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch._foreach_<op>`` as a loop of the single-tensor op (see :func:`foreach`)."""
    count = next(len(arg) for arg in args if type(arg) in (list, tuple))
    results = []
    for i in range(count):
        first, *rest = (arg[i] if type(arg) in (list, tuple) else arg for arg in args)
        results.append(_single_tensor_op(op, first, rest, kwargs))
    return None if op.endswith("_") else results


def _single_tensor_op(op: str, first: Any, rest: list[Any], kwargs: dict[str, Any]) -> Any:
    """The op of ``torch._foreach_<op>`` on one leaf (``first``, with ``rest`` for it)."""
    if op == "norm":
        return torch.linalg.vector_norm(first, *rest, **kwargs)
    if op in ("addcmul_", "addcdiv_"):  # ``x + value * y (* or /) z``, the kernel's order
        # (``vmap`` has no batching rule for these two: it would loop over the batch).
        (y, z), value = rest[:2], rest[2] if len(rest) == 3 else kwargs.get("value", 1)
        product = torch.mul(y, value)
        return first.add_(product.mul_(z) if op == "addcmul_" else product.div_(z))
    if op.rstrip("_") in ("maximum", "minimum") and not isinstance(rest[0], torch.Tensor):
        op = op.replace("maximum", "clamp_min").replace("minimum", "clamp_max")
    if op.endswith("_"):
        return getattr(first, op)(*rest, **kwargs)
    return getattr(torch, op)(first, *rest, **kwargs)


# ----------------------------------------------------------------------------------------------
# Scalars and dtypes.


def scalar_like(value: Scalar, xs: Leaves) -> ScalarOrLeaves:
    """``value`` as an operand that keeps every leaf's dtype (JAX's weak typing).

    Python numbers are returned unchanged. A tensor is cast to the leaves' dtype, or to each
    leaf's dtype (a list) when the leaves differ: a 0-d ``float64`` value must neither promote
    a 0-d ``float32`` leaf nor be rounded differently than Optax rounds it.
    """
    if not isinstance(value, torch.Tensor) or not xs:
        return value
    if len(set(attributes("dtype", xs))) == 1:
        return value.to(xs[0].dtype)
    return [value.to(x.dtype) for x in xs]


def _operand(scalar: ScalarOrLeaves, xs: Leaves, tensor_scalar: bool = False) -> Any:
    """Turns ``scalar`` into an argument every ``torch._foreach_*`` binary op with ``xs`` accepts.

    A 0-d tensor scalar of another dtype than a 0-d leaf is cast to each leaf's dtype: torch
    promotes two 0-d tensors to the wider dtype, so that leaf alone would change dtype while
    every larger leaf keeps its own. A 0-d tensor that requires grad is repeated into a list:
    the foreach kernels that take a single tensor scalar have no backward formula, while the
    list form does. Only ``mul`` and ``div`` (``tensor_scalar``) take a 0-d tensor scalar
    on the device; the other foreach kernels read it on the host (``.item()``, a device
    synchronisation, a graph break under ``torch.compile`` and an error on ``meta`` tensors),
    so they get the list form too.
    """
    if not isinstance(scalar, torch.Tensor):
        scalar = _weak_scalar(scalar, xs)
        return _cpu_tensor_scalar(scalar, xs) if tensor_scalar else scalar
    if 0 in attributes("ndim", xs) and any(x.ndim == 0 and x.dtype != scalar.dtype for x in xs):
        return [scalar.to(x.dtype) for x in xs]
    if scalar.requires_grad or not tensor_scalar:
        return [scalar] * len(xs)
    return scalar


def _weak_scalar(scalar: Any, xs: Leaves) -> Any:
    """A Python float as JAX computes with it beside bfloat16 or float16 leaves: rounded to
    their dtype first (a weakly typed scalar takes the array's dtype).

    torch's in-place foreach kernels round it so and its out-of-place ones do not, so without
    this the pure and the in-place paths of one transformation differ by an ulp of such leaves.
    """
    if type(scalar) is not float:
        return scalar
    dtypes = attributes("dtype", xs)
    if not set(dtypes) & _REDUCED_PRECISION_DTYPES:
        return scalar
    rounded = [float(torch.tensor(scalar, dtype=dtype)) if dtype in _REDUCED_PRECISION_DTYPES
               else scalar for dtype in dtypes]
    return rounded[0] if len(set(rounded)) == 1 else rounded


def _cpu_tensor_scalar(scalar: Any, xs: Leaves) -> Any:
    """A Python number as the 0-d tensor a CPU ``torch._foreach_mul``/``div`` runs faster with.

    On the CPU, a foreach kernel given a Python number wraps it into a new tensor for every
    leaf (a few microseconds each: most of a step over many small leaves); a 0-d tensor is
    read as it is. The kernels compute float32 and float64 leaves in their own precision, so a
    0-d tensor of the leaves' dtype holds the very value they would compute with: the same bits.
    Other dtypes, devices, tensor subclasses (``DTensor``) and code being compiled keep the
    number.
    """
    if (type(scalar) not in (float, int) or torch.compiler.is_compiling()
            or set(map(type, xs)) - PLAIN_TENSOR_TYPES):
        return scalar
    dtypes = set(attributes("dtype", xs))
    if len(dtypes) != 1 or not dtypes <= _OWN_PRECISION_DTYPES or not all(attributes("is_cpu", xs)):
        return scalar
    return torch.tensor(scalar, dtype=xs[0].dtype, device="cpu")  # whatever the default


def widest_real_dtype(xs: Leaves) -> torch.dtype:
    """The widest real floating dtype among the leaves (complex leaves count as their parts).

    Float32 when all leaves are narrower; JAX's default float when there is no floating leaf
    (an empty group: what JAX computes in without any operand).
    """
    reals = [_REAL_OF_COMPLEX.get(dtype, dtype) for dtype in set(attributes("dtype", xs))
             if dtype.is_floating_point or dtype.is_complex]
    if not reals:
        return default_float()
    dtype = torch.float32
    for real in reals:
        dtype = torch.promote_types(dtype, real)
    return dtype


def cast(xs: Leaves, dtype: torch.dtype | None) -> Leaves:
    """Casts each leaf to ``dtype`` (no copy when already of that dtype; ``None`` keeps it)."""
    if dtype is None:
        return list(xs)
    return [x.to(dtype) for x in xs]


# ----------------------------------------------------------------------------------------------
# Elementwise arithmetic on lists of leaves. A function without a trailing underscore is
# pure; its in-place twin (``_``, for the opt-in ``inplace=True`` paths of transforms)
# follows it, writes into its first argument and runs the same kernels, so both paths give
# bit-identical numbers.


def add(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """``x + y`` per leaf; ``ys`` is a list of leaves or a scalar."""
    if not xs:
        return []
    return list(foreach("add", xs, _operand(ys, xs)))


def add_(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """Writes ``x + y`` into each ``x``; the in-place twin of :func:`add`."""
    if xs:
        foreach("add_", xs, _operand(ys, xs))
    return xs


def sub(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """``x - y`` per leaf."""
    if not xs:
        return []
    return list(foreach("sub", xs, _operand(ys, xs)))


def mul(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """``x * y`` per leaf."""
    if not xs:
        return []
    return list(foreach("mul", xs, _operand(ys, xs, tensor_scalar=True)))


def mul_(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """Writes ``x * y`` into each ``x``; the in-place twin of :func:`mul`."""
    if xs:
        foreach("mul_", xs, _operand(ys, xs, tensor_scalar=True))
    return xs


def div(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """``x / y`` per leaf."""
    if not xs:
        return []
    return list(foreach("div", xs, _operand(ys, xs, tensor_scalar=True)))


def div_(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """Writes ``x / y`` into each ``x``; the in-place twin of :func:`div`."""
    if xs:
        foreach("div_", xs, _operand(ys, xs, tensor_scalar=True))
    return xs


def add_scaled(xs: Leaves, scale: ScalarOrLeaves, ys: Leaves) -> Leaves:
    """``x + scale * y`` per leaf, in one pass when ``scale`` is a Python number.

    ``scale`` may also be a tensor or one scalar per leaf (as :func:`scalar_like` returns).
    """
    if not xs:
        return []
    if isinstance(scale, (torch.Tensor, list)):
        return add(xs, mul(ys, scale))
    return list(foreach("add", xs, ys, alpha=scale))


def add_scaled_(xs: Leaves, scale: Scalar, ys: Leaves) -> Leaves:
    """Writes ``x + scale * y`` into each ``x``; the in-place twin of :func:`add_scaled`."""
    if not xs:
        return xs
    if isinstance(scale, torch.Tensor):
        foreach("add_", xs, mul(ys, scale))
    else:
        foreach("add_", xs, ys, alpha=scale)
    return xs


def neg(xs: Leaves) -> Leaves:
    """``-x`` per leaf."""
    return list(foreach("neg", xs)) if xs else []


def neg_(xs: Leaves) -> Leaves:
    """Writes ``-x`` into each ``x``."""
    if xs:
        foreach("neg_", xs)
    return xs


def abs(xs: Leaves) -> Leaves:
    """``|x|`` per leaf."""
    return list(foreach("abs", xs)) if xs else []


def sign(xs: Leaves) -> Leaves:
    """``sign(x)`` per leaf, NaN staying NaN as in ``jnp.sign``.

    ``torch.sign(nan)`` is 0, which would turn a NaN gradient into a silent no-op update.
    ``maximum(sign(x), min(x, -2))`` equals ``sign(x)`` for every other value (no ties, so no
    gradient leaks through the second operand) and carries NaN over.
    """
    if not xs:
        return []
    return list(foreach("maximum", foreach("sign", xs), _nan_carrier(xs)))


def _nan_carrier(xs: Leaves) -> Leaves:
    """``min(x, -2)`` per leaf: NaN where ``x`` is NaN, below every sign value elsewhere."""
    return list(foreach("clamp_max", xs, -2.0))


def sign_(xs: Leaves) -> Leaves:
    """Writes ``sign(x)`` into each ``x``, NaN staying NaN (see :func:`sign`), allocating nothing.

    Scaling by ``1 / eps`` (a power of two, exact) lifts every nonzero value, subnormals
    included, to at least the smallest normal number ``tiny`` in magnitude; clamping to
    ``[-tiny, tiny]`` then leaves ``±tiny``, zero or NaN (a clamp carries NaN over), and scaling
    by ``1 / tiny`` gives ``±1``. The same values as :func:`sign`, whose ``torch.sign`` also
    takes a subnormal to ``±1``.
    """
    if xs:
        mul_(xs, _per_dtype(xs, lambda limits: 1 / limits.eps))
        clamp_(xs, _per_dtype(xs, lambda limits: -limits.smallest_normal),
               _per_dtype(xs, lambda limits: limits.smallest_normal))
        mul_(xs, _per_dtype(xs, lambda limits: 1 / limits.smallest_normal))
    return xs


def _per_dtype(xs: Leaves, value: Callable[[torch.finfo], float]) -> float | list[float]:
    """``value(torch.finfo(dtype))`` for the leaves' one dtype, or one per leaf when they differ."""
    dtypes = attributes("dtype", xs)
    if len(set(dtypes)) == 1:
        return value(torch.finfo(dtypes[0]))
    return [value(torch.finfo(dtype)) for dtype in dtypes]


def sqrt(xs: Leaves) -> Leaves:
    """``sqrt(x)`` per leaf."""
    return list(foreach("sqrt", xs)) if xs else []


def sqrt_(xs: Leaves) -> Leaves:
    """Writes ``sqrt(x)`` into each ``x``."""
    if xs:
        foreach("sqrt_", xs)
    return xs


def rsqrt(xs: Leaves) -> Leaves:
    """``1 / sqrt(x)`` per leaf."""
    return list(foreach("rsqrt", xs)) if xs else []


def reciprocal_(xs: Leaves) -> Leaves:
    """Writes ``1 / x`` into each ``x``."""
    if xs:
        foreach("reciprocal_", xs)
    return xs


def square(xs: Leaves) -> Leaves:
    """``x * x`` per leaf."""
    return mul(xs, xs)


def abs_sq(xs: Leaves) -> Leaves:
    """``|x| ** 2`` per leaf (``x * x`` for real leaves, a real result for complex ones)."""
    if not any(x.is_complex() for x in xs):
        return square(xs)
    return [(x.conj() * x).real if x.is_complex() else x * x for x in xs]


def power(xs: Leaves, exponent: Scalar) -> Leaves:
    """``x ** exponent`` per leaf; integer orders 1 and 2 avoid ``pow``, as JAX's ``**`` does."""
    if is_one(exponent):
        return list(xs)
    if isinstance(exponent, int) and exponent == 2:
        return square(xs)
    return list(foreach("pow", xs, exponent)) if xs else []


def maximum(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """Elementwise maximum per leaf."""
    if not xs:
        return []
    return list(foreach("maximum", xs, _bound(ys, xs)))


def minimum(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """Elementwise minimum per leaf."""
    if not xs:
        return []
    return list(foreach("minimum", xs, _bound(ys, xs)))


def clamp_(xs: Leaves, low: Scalar, high: Scalar) -> Leaves:
    """Writes ``min(max(x, low), high)`` into each ``x``; the twin of ``minimum(maximum(..))``."""
    if xs:
        foreach("maximum_", xs, _bound(low, xs))
        foreach("minimum_", xs, _bound(high, xs))
    return xs


def _bound(bound: ScalarOrLeaves, xs: Leaves) -> Any:
    """The operand of ``torch._foreach_maximum``/``minimum`` for ``bound``.

    DTensor has no sharding strategy for the Scalar and ScalarList forms of these kernels
    (``aten._foreach_maximum.Scalar``, ``aten._foreach_minimum_.ScalarList``, ...), only for the
    List form; on DTensor leaves a scalar bound is passed as one 0-d tensor per leaf, which is
    the same elementwise operation (same values, same gradient at ties).
    """
    operand = _operand(bound, xs)
    if isinstance(operand, list) and operand and isinstance(operand[0], torch.Tensor):
        return operand
    if not is_distributed(xs):
        return operand
    values = operand if isinstance(operand, list) else [operand] * len(xs)
    return [torch.as_tensor(value, dtype=x.dtype, device=x.device)
            for value, x in zip(values, xs)]


def addcmul_(xs: Leaves, ys: Leaves, zs: Leaves, value: float) -> Leaves:
    """Writes ``x + value * y * z`` into each ``x``, one pass (``torch._foreach_addcmul_``)."""
    if xs:
        foreach("addcmul_", xs, ys, zs, value=value)
    return xs


def addcdiv_(xs: Leaves, ys: Leaves, zs: Leaves) -> Leaves:
    """Writes ``x + y / z`` into each ``x``, one pass (``torch._foreach_addcdiv_``)."""
    if xs:
        foreach("addcdiv_", xs, ys, zs)
    return xs


# ----------------------------------------------------------------------------------------------
# Buffers, and blocks for in-place steps.


def zeros_like(xs: Leaves, dtype: torch.dtype | None = None) -> Leaves:
    """Zeros shaped (and, unless ``dtype`` is given, typed) like each leaf."""
    return [torch.zeros_like(x, dtype=dtype) for x in xs]


def clone(xs: Leaves) -> Leaves:
    """Fresh copies of the leaves, to be written into by in-place kernels."""
    return [x.clone() for x in xs]


def where(condition: torch.Tensor | bool, xs: Leaves, ys: Leaves) -> Leaves:
    """Selects ``xs`` where ``condition`` holds else ``ys`` (``lax.select`` without a host sync)."""
    if not isinstance(condition, torch.Tensor):
        condition = torch.tensor(bool(condition), device=xs[0].device if xs else None)
    return [torch.where(condition, x, y) for x, y in zip(xs, ys)]


def copy_(destinations: Leaves, sources: Leaves) -> Leaves:
    """Copies each source into its destination buffer (casting to the destination's dtype).

    DTensor has no sharding strategy for ``aten._foreach_copy_``; DTensor leaves are copied one
    by one with ``Tensor.copy_``, which it has. So are leaves being compiled: Inductor (torch
    2.13) lowers ``_foreach_copy_`` destination after destination, computing each source as it
    writes it, so that a source reading an earlier destination (a new state computed from
    another old one) reads its new value; single copies are ordered correctly, and fused alike.
    """
    if not destinations:
        return destinations
    if is_distributed(destinations) or torch.compiler.is_compiling():
        for destination, source in zip(destinations, sources, strict=True):
            destination.copy_(source)
    else:
        foreach("copy_", destinations, sources)
    return destinations


# 1 MiB of float32: a block's temporaries stay in a core's L2 cache, and the per-block Python
# cost is small against the block's arithmetic.
BLOCK_ELEMENTS = 2**18


def blocks(*groups: Leaves, split: bool = True) -> Iterator[tuple[Leaves, ...]]:
    """The leaves of ``groups`` in blocks of about :data:`BLOCK_ELEMENTS` elements.

    An in-place step whose formula reads two buffers it overwrites (Lion's direction and
    momentum both read the gradient and the old momentum) needs temporaries; run block by
    block, they span one block instead of the parameters, and each block is still one foreach
    call per operation. The ``i``-th leaves of every group must have the same shape. Leaves of
    more than ``BLOCK_ELEMENTS`` elements are cut into views of ``BLOCK_ELEMENTS`` (a multiple
    of every vector width, so each element meets the same kernel code path as in the whole
    leaf); smaller leaves are gathered, in order, into blocks of at most ``BLOCK_ELEMENTS``
    elements. Non-contiguous leaves, which have no flat view, stay whole, and so does every
    leaf without ``split`` (a formula that reduces over a leaf's axes); then only the ``i``-th
    leaves of the first group are counted, and the others may have any shape. Distributed
    leaves (DTensor shards) and code being compiled (Inductor plans its own buffers) get all
    the leaves as one block.

    Yields:
      Tuples with one list of leaves (or views) per group.
    """
    if is_distributed(groups[0]) or torch.compiler.is_compiling():
        yield groups
        return
    block: tuple[Leaves, ...] = tuple([] for _ in groups)
    elements = 0
    for leaves in zip(*groups, strict=True):
        pieces: Iterable[tuple[torch.Tensor, ...]] = (leaves,)
        if (split and leaves[0].numel() > BLOCK_ELEMENTS
                and all(x.is_contiguous() for x in leaves)):
            pieces = zip(*(x.view(-1).split(BLOCK_ELEMENTS) for x in leaves), strict=True)
        for piece in pieces:
            if elements + piece[0].numel() > BLOCK_ELEMENTS and elements:
                yield block
                block, elements = tuple([] for _ in groups), 0
            for part, x in zip(block, piece):
                part.append(x)
            elements += piece[0].numel()
    if elements or block[0]:
        yield block


# ----------------------------------------------------------------------------------------------
# Reductions. Each returns a 0-d tensor and never synchronises with the device.


def sum_of_squares(xs: Leaves) -> torch.Tensor:
    """``sum(x ** 2)`` over all elements of all leaves (complex leaves use ``|x| ** 2``)."""
    if not xs:
        return as_weak(0.0)
    norms = foreach("norm", [x.abs() if x.is_complex() else x for x in xs])
    return sum_scalars(foreach("mul", norms, norms))


def vdot(xs: Leaves, ys: Leaves) -> torch.Tensor:
    """``sum(conj(x) * y)`` over all elements of all leaves (JAX's tree ``vdot``), a 0-d tensor.

    A DTensor leaf sharded unevenly (FSDP2 shards dimension 0 of any size) cannot be flattened
    with ``reshape(-1)``; its product is summed instead, a partial sum on each rank that DTensor
    reduces, so nothing is gathered.
    """
    if not xs:
        return torch.tensor(0.0)
    if is_distributed(xs):
        return sum_scalars([(x.conj() * y if x.is_complex() else x * y).sum()
                            for x, y in zip(xs, ys, strict=True)])
    return sum_scalars([torch.vdot(*promoted(x.reshape(-1), y.reshape(-1)))
                        for x, y in zip(xs, ys)])


def promoted(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` and ``y`` in the dtype the two promote to, as JAX's ``vdot`` and ``matmul`` take
    them (torch's refuse two dtypes)."""
    if x.dtype == y.dtype:
        return x, y
    dtype = torch.promote_types(x.dtype, y.dtype)
    return x.to(dtype), y.to(dtype)


def real_vdot(xs: Leaves, ys: Leaves) -> torch.Tensor:
    """``Re(sum(conj(x) * y))`` over all elements of all leaves, a 0-d tensor (the inner product
    of the real vector space, which TorchOpt's linear solvers use); a real and a complex leaf
    meet through their real parts."""
    def leaf(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = x.reshape(-1), y.reshape(-1)
        dot = torch.dot(x.real, y.real)
        return dot + torch.dot(x.imag, y.imag) if x.is_complex() and y.is_complex() else dot

    return sum(map(leaf, xs, ys))


def sum_scalars(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """Adds 0-d tensors of possibly different dtypes, promoting as JAX does (none: a weak 0)."""
    if not values:
        return as_weak(0.0)
    dtype = values[0].dtype
    for value in values[1:]:
        dtype = torch.promote_types(dtype, value.dtype)
    return torch.stack([v.to(dtype) for v in values]).sum()


# ----------------------------------------------------------------------------------------------
# One scalar per leaf (block norms, clipping factors), computed in a few batched ops.


def norms(xs: Leaves) -> Leaves:
    """The Euclidean (Frobenius) norm of each leaf, as 0-d tensors."""
    return list(foreach("norm", xs)) if xs else []


def root_mean_squares(xs: Leaves) -> Leaves:
    """The root mean square of the elements of each leaf (``|x|`` for complex), as 0-d tensors.

    Computed as ``norm(x) / sqrt(numel(x))`` with one ``torch._foreach_norm`` for all leaves.
    The gradient is 0, not NaN, at a leaf of zeros.
    """
    if not xs:
        return []
    return list(foreach("div", norms(xs), [math.sqrt(x.numel()) for x in xs]))


def map_stacked(fn: Callable[[torch.Tensor], torch.Tensor],
                values: Sequence[torch.Tensor]) -> Leaves:
    """Applies an elementwise ``fn`` to 0-d tensors stacked into one vector per dtype and device.

    Per-leaf scalars (norms, clipping factors) then cost one op for the whole tree instead of
    one per leaf, and each result keeps the dtype of its value (a ``float32`` leaf is never
    promoted by a ``float64`` factor).

    Args:
      fn: maps a 1-d tensor to a tensor of the same shape and dtype, elementwise.
      values: 0-d tensors, e.g. from :func:`norms`.

    Returns:
      ``fn`` of each value, as 0-d tensors in the order of ``values``.
    """
    groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for index, value in enumerate(values):
        groups.setdefault((value.dtype, value.device), []).append(index)
    if len(groups) <= 1:
        return list(fn(torch.stack(list(values))).unbind()) if values else []
    results: list[Any] = [None] * len(values)
    for indices in groups.values():
        mapped = fn(torch.stack([values[index] for index in indices])).unbind()
        for index, result in zip(indices, mapped, strict=True):
            results[index] = result
    return results


def at_least(values: torch.Tensor, minimum: Scalar) -> torch.Tensor:
    """``values``, with ``minimum`` wherever they are not above it (gradient 0 there).

    ``minimum`` takes the dtype of ``values``, so a ``float64`` bound never promotes them.
    """
    floor = torch.as_tensor(minimum, dtype=values.dtype, device=values.device)
    return torch.where(values <= floor, floor, values)
