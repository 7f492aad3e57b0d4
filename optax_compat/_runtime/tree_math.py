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
  :func:`_operand`), the one weak-type rule of :mod:`.dtypes`; arithmetic between scalars runs
  in the scalars' own dtypes first (as JAX computes on them).
"""

from __future__ import annotations

import functools
import math
import operator
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Union

import optree
import torch

from optax_compat._runtime.dtypes import as_weak, default_float
from optax_compat._runtime.numbers import is_one

Leaves = list[torch.Tensor]
Scalar = Union[float, int, torch.Tensor]
ScalarOrLeaves = Union[Scalar, Sequence[torch.Tensor]]

NONE_IS_LEAF = False
NAMESPACE = "optax_compat"  # sees global registrations too, plus our private node types
_PLAIN_TENSOR_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})
# Where Dynamo keeps its Python substitute for optree (its ``PyTreeSpec``, the structures
# ``optree.tree_flatten`` returns while tracing); loaded with Dynamo.
_SUBSTITUTE_MODULE = "torch._dynamo.polyfills.pytree"
_SUBSTITUTE_FIELDS = ("_children", "_type", "_metadata", "_entries", "_unflatten_func",
                      "none_is_leaf", "namespace")
# Its pure-Python versions of optree's leaf test and dict (un)flattening.
_SUBSTITUTE_FUNCTIONS = ("tree_is_leaf", "dict_flatten", "dict_unflatten")
_OWN_PRECISION_DTYPES = frozenset({torch.float32, torch.float64})
# ``dtype.to_real()``, which Dynamo cannot trace.
_REAL_OF_COMPLEX = {torch.complex32: torch.float16, torch.complex64: torch.float32,
                    torch.complex128: torch.float64}


def attributes(name: str, xs: Iterable[Any]) -> list[Any]:
    """``[getattr(x, name) for x in xs]``: one C-level pass in eager mode (the per-step checks
    over many leaves cost a Python call each otherwise), a loop Dynamo traces under
    ``torch.compile`` (it cannot call ``operator.attrgetter``)."""
    if torch.compiler.is_compiling():
        return [getattr(x, name) for x in xs]
    return list(map(operator.attrgetter(name), xs))


def check_is_tree(tree: Any) -> None:
    """Raises ``TypeError`` with the fix when ``tree`` is a module or a one-shot iterator.

    ``tx.init(model)`` and ``tx.init(model.parameters())`` are the first thing a PyTorch user
    tries; both would otherwise fail later, far from the cause.
    """
    if isinstance(tree, torch.nn.Module):
        raise TypeError("Expected a tree of tensors, got the module "
                        f"{type(tree).__name__}; pass dict(model.named_parameters()).")
    if isinstance(tree, Iterator):
        raise TypeError(f"Expected a tree of tensors, got an iterator ({type(tree).__name__}, "
                        "e.g. model.parameters()), which can be read only once and names "
                        "nothing; pass dict(model.named_parameters()).")


def flatten(tree: Any) -> tuple[Leaves, optree.PyTreeSpec]:
    """Flattens ``tree`` into its leaves and structure (``None`` is an empty subtree)."""
    shallow = _flatten_shallow(tree)
    if shallow is not None:
        return shallow
    check_is_tree(tree)
    return traced_or_optree_flatten(tree, NONE_IS_LEAF)


def traced_or_optree_flatten(tree: Any, none_is_leaf: bool,
                             is_leaf: Callable[[Any], bool] | None = None) -> tuple[Leaves, Any]:
    """``optree.tree_flatten(tree, is_leaf)``; while Dynamo traces, built here with dict nodes
    flattened by Dynamo's own dict substitute.

    Dynamo runs optree's real dict flattening when a dict holds only Python constants (say a
    dict of ``MaskedNode`` built by a mask while tracing), and from optree 0.20 on that returns
    metadata Dynamo cannot hold, so ``optree.tree_flatten`` breaks the graph on such a tree.
    """
    module = sys.modules.get(_SUBSTITUTE_MODULE)
    spec_type = torch.compiler.is_dynamo_compiling() and _substitute_spec_type()
    if not (spec_type and all(hasattr(module, name) for name in _SUBSTITUTE_FUNCTIONS)):
        return optree.tree_flatten(tree, is_leaf=is_leaf, none_is_leaf=none_is_leaf,
                                   namespace=NAMESPACE)
    leaves: list[Any] = []
    leaf = spec_type((), None, None, (), None, none_is_leaf=none_is_leaf, namespace=NAMESPACE)

    def node_spec(node: Any) -> tuple[Any, bool]:
        """The structure of ``node`` and whether it holds a tensor; appends its leaves."""
        if (is_leaf is not None and is_leaf(node)) or module.tree_is_leaf(
                node, none_is_leaf=none_is_leaf, namespace=NAMESPACE):
            leaves.append(node)
            return leaf, isinstance(node, torch.Tensor)
        if type(node) is dict:
            # What Dynamo's dict substitute returns (calling it would fold it again).
            entries = optree.utils.total_order_sorted(node)
            children, metadata = [node[key] for key in entries], (list(node), entries)
            unflatten_func = _DICT_UNFLATTEN
        else:
            children, metadata, entries, unflatten_func = optree.tree_flatten_one_level(
                node, none_is_leaf=none_is_leaf, namespace=NAMESPACE)
        specs, holds_tensor = [], False
        for child in children:
            spec, child_holds_tensor = node_spec(child)
            specs.append(spec)
            holds_tensor = holds_tensor or child_holds_tensor
        if type(node) is dict and not holds_tensor:
            # Dynamo would fold optree's unflatten of these constants, which cannot read the
            # substitute's metadata; its own dict unflatten can (and is traced instead).
            unflatten_func = _constant_dict_unflatten
        # A dict holding tensors gets what Dynamo builds for it, so structures compare equal.
        return spec_type(tuple(specs), type(node), metadata, tuple(entries), unflatten_func,
                         none_is_leaf=none_is_leaf, namespace=NAMESPACE), holds_tensor

    return leaves, node_spec(tree)[0]


def _constant_dict_unflatten(metadata: tuple[list[Any], list[Any]], values: Iterable[Any]) -> dict:
    """Dynamo's dict unflatten, as a function of ours (Dynamo folds its own on constants)."""
    original_keys, sorted_keys = metadata
    result = dict.fromkeys(original_keys)
    result.update(zip(sorted_keys, values))
    return result


# optree's dict unflatten, which Dynamo runs as its substitute on a dict holding tensors.
_DICT_UNFLATTEN = optree.register_pytree_node.get(dict, namespace=NAMESPACE).unflatten_func


def traced_flatten_one_level(tree: Any, none_is_leaf: bool) -> tuple[Leaves, Any] | None:
    """While Dynamo traces: the flattening of a list, tuple or dict of (two or more) plain
    tensors, else ``None`` (and always ``None`` outside Dynamo, e.g. in a non-strict
    ``torch.export``, where optree runs as itself).

    Dynamo runs ``optree.tree_flatten`` as a Python substitute that builds one structure
    object per leaf; over a hundred leaves that is half a second of tracing per call, and an
    update flattens a dozen trees. Here the node is flattened one level and its structure
    built once, with one shared leaf structure: the same value, equal to the substitute's.
    """
    node = _traced_node_of_tensors(tree, none_is_leaf)
    spec_type = _substitute_spec_type()
    if node is None or spec_type is None:
        return None
    children, metadata, entries, unflatten_func = node
    leaf = spec_type((), None, None, (), None, none_is_leaf=none_is_leaf, namespace=NAMESPACE)
    return list(children), spec_type((leaf,) * len(children), type(tree), metadata, entries,
                                     unflatten_func, none_is_leaf=none_is_leaf,
                                     namespace=NAMESPACE)


def _traced_node_of_tensors(tree: Any, none_is_leaf: bool) -> tuple[Any, ...] | None:
    """While Dynamo traces, ``optree.tree_flatten_one_level(tree)`` if ``tree`` is a list,
    tuple or dict of two or more plain tensors, else ``None``."""
    kind = type(tree)
    if not ((kind is list or kind is tuple or kind is dict) and len(tree) > 1
            and torch.compiler.is_dynamo_compiling()):
        return None
    # Checked before flattening: optree 0.20's flattening of a dict of Python constants
    # returns metadata Dynamo cannot hold, which breaks the graph.
    values = tree.values() if kind is dict else tree
    if not all(type(child) in _PLAIN_TENSOR_TYPES for child in values):
        return None
    return optree.tree_flatten_one_level(tree, none_is_leaf=none_is_leaf, namespace=NAMESPACE)


def _flatten_shallow(tree: Any) -> tuple[Leaves, Any] | None:
    """The one-level flattening of a list, tuple or dict of plain tensors: while tracing,
    :func:`traced_flatten_one_level`; in eager mode, :func:`_flatten_one_level`."""
    if torch.compiler.is_compiling():
        return traced_flatten_one_level(tree, NONE_IS_LEAF)
    return _flatten_one_level(tree)


def _flatten_one_level(tree: Any) -> tuple[Leaves, optree.PyTreeSpec] | None:
    """:func:`flatten` of a list, tuple or dict of (two or more) plain tensors, else ``None``.

    The common trees of PyTorch code (``list(model.parameters())``,
    ``dict(model.named_parameters())``) flatten several times per step; optree spends most of
    its time deciding, leaf by leaf, that a tensor is a leaf. Here one C-level pass checks the
    leaves' types, and the structure (and, for a dict, optree's key order) is computed once per
    length or key sequence.
    """
    kind = type(tree)
    if kind is list or kind is tuple:
        if len(tree) > 1 and _PLAIN_TENSOR_TYPES.issuperset(map(type, tree)):
            return list(tree), _sequence_spec(kind, len(tree))
    elif kind is dict and len(tree) > 1:
        values = list(tree.values())
        if _PLAIN_TENSOR_TYPES.issuperset(map(type, values)):
            spec, in_leaf_order = _dict_spec(tuple(tree))
            return list(in_leaf_order(values)), spec
    return None


@functools.lru_cache(maxsize=64)
def _sequence_spec(kind: type, length: int) -> optree.PyTreeSpec:
    return optree.tree_structure(kind(range(length)), none_is_leaf=NONE_IS_LEAF,
                                 namespace=NAMESPACE)


@functools.lru_cache(maxsize=64)
def _dict_spec(keys: tuple[Any, ...]) -> tuple[optree.PyTreeSpec, Callable[[list], tuple]]:
    """The structure of a dict with these keys (in this insertion order), and a function
    taking its values in insertion order to them in optree's leaf order."""
    order, spec = optree.tree_flatten(dict(zip(keys, range(len(keys)))),
                                      none_is_leaf=NONE_IS_LEAF, namespace=NAMESPACE)
    return spec, operator.itemgetter(*order)


def unflatten(treespec: optree.PyTreeSpec, leaves: Sequence[Any]) -> Any:
    """Rebuilds a tree of structure ``treespec`` from ``leaves``.

    While Dynamo traces, a node whose children are all leaves is rebuilt by its type's own
    unflatten function at once: Dynamo's optree substitute otherwise rebuilds each leaf as a
    subtree of its own (0.7 s of tracing per call over a thousand leaves).
    """
    if _is_traced_one_level(treespec):
        leaves = list(leaves)
        if len(leaves) == treespec.num_leaves:
            return treespec._unflatten_func(treespec._metadata, leaves)
    return optree.tree_unflatten(treespec, leaves)


def same_structure(a: optree.PyTreeSpec, b: optree.PyTreeSpec) -> bool:
    """``a == b``. While Dynamo traces, two nodes whose children are all leaves are compared
    as nodes; Dynamo's optree substitute otherwise compares them leaf by leaf."""
    if _is_traced_one_level(a) and _is_traced_one_level(b):
        return (a.type is b.type and a.num_leaves == b.num_leaves
                and a.none_is_leaf == b.none_is_leaf and a.namespace == b.namespace
                and a._metadata == b._metadata and a._entries == b._entries)
    return a == b


def _is_traced_one_level(spec: Any) -> bool:
    """Whether Dynamo is tracing and ``spec`` is a structure of its optree substitute with two
    or more children, all leaves (a leaf is the one node with a leaf and no children)."""
    return (torch.compiler.is_dynamo_compiling() and type(spec) is _substitute_spec_type()
            and spec.num_leaves > 1 and spec.num_nodes == spec.num_leaves + 1)


def _substitute_spec_type() -> type | None:
    """The ``PyTreeSpec`` class of Dynamo's optree substitute, if Dynamo is loaded and the
    class has the fields this module builds and reads, in this order; else ``None`` (the
    shortcuts above are then off and optree's substitute does the work)."""
    spec_type = getattr(sys.modules.get(_SUBSTITUTE_MODULE), "PyTreeSpec", None)
    fields = tuple(getattr(spec_type, "__dataclass_fields__", ()))
    return spec_type if fields[:len(_SUBSTITUTE_FIELDS)] == _SUBSTITUTE_FIELDS else None


def leaves(tree: Any) -> Leaves:
    """The leaves of ``tree`` in flattening order."""
    return flatten(tree)[0]


def treespec(tree: Any) -> optree.PyTreeSpec:
    """The structure of ``tree``."""
    shallow = _flatten_shallow(tree)
    if shallow is not None:
        return shallow[1]
    if torch.compiler.is_dynamo_compiling():
        return traced_or_optree_flatten(tree, NONE_IS_LEAF)[1]
    return optree.tree_structure(tree, none_is_leaf=NONE_IS_LEAF, namespace=NAMESPACE)


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any, is_leaf: Any = None) -> Any:
    """``optree.tree_map`` with this package's pytree conventions."""
    check_is_tree(tree)
    return optree.tree_map(fn, tree, *rest, is_leaf=is_leaf, none_is_leaf=NONE_IS_LEAF,
                           namespace=NAMESPACE)


def first_difference(expected: Any, actual: Any, expected_name: str = "the expected tree",
                     actual_name: str = "the tree") -> str:
    """Describes how the structure of ``actual`` differs from ``expected``, for error messages.

    Names the first entry ``expected`` has that ``actual`` lacks and the first entry ``actual``
    has that ``expected`` lacks, e.g. ``"updates has no key 'b' that params has"``; when both
    have the same paths, the node types that differ.
    """
    expected_paths, _, expected_spec = optree.tree_flatten_with_path(
        expected, none_is_leaf=NONE_IS_LEAF, namespace=NAMESPACE)
    actual_paths, _, actual_spec = optree.tree_flatten_with_path(
        actual, none_is_leaf=NONE_IS_LEAF, namespace=NAMESPACE)
    expected_set, actual_set = set(expected_paths), set(actual_paths)
    missing = next((path for path in expected_paths if path not in actual_set), None)
    extra = next((path for path in actual_paths if path not in expected_set), None)
    differences = []
    if missing is not None:
        differences.append(f"{actual_name} has no {_entry(missing)} that {expected_name} has")
    if extra is not None:
        differences.append(f"{actual_name} has an extra {_entry(extra)}")
    if differences:
        return "; ".join(differences)
    return f"node types differ: {expected_spec} vs {actual_spec}"


def _entry(path: tuple[Any, ...]) -> str:
    """``key 'b'`` for a top-level dict key, else ``leaf at path ['a'][1]``."""
    if len(path) == 1 and isinstance(path[0], str):
        return f"key {path[0]!r}"
    return f"leaf at path {path_str(path)}"


def path_str(path: tuple[Any, ...]) -> str:
    """A path from ``optree.tree_flatten_with_path`` as subscripts, e.g. ``['w'][0]``."""
    return "".join(f"[{key!r}]" for key in path) or "<root>"


def leaves_like(tree: Any, spec: optree.PyTreeSpec, what: str, reference: Any = None) -> Leaves:
    """The leaves of ``tree``, checking that its structure is ``spec``.

    Args:
      tree: the tree to flatten, e.g. a moment buffer from an optimizer state.
      spec: the structure it must have, usually that of the incoming ``updates``.
      what: a name for ``tree`` used in the error message.
      reference: a tree with structure ``spec``, to name the first differing path on error.

    Raises:
      ValueError: naming the first path where ``tree`` differs from ``spec``.
    """
    tree_leaves, tree_spec = flatten(tree)
    if torch.compiler.is_compiling() and isinstance(spec, optree.PyTreeSpec):
        # ``spec`` was built before tracing: Dynamo cannot compare optree's C++ structure with
        # the ones it builds, so a traced call checks the number of leaves.
        matches = len(tree_leaves) == spec.num_leaves
    else:
        matches = same_structure(tree_spec, spec)
    if not matches:
        where = (first_difference(tree, reference, what, "updates") if reference is not None
                 else f"expected structure {spec}, got {tree_spec}")
        raise ValueError(f"The structure of {what} does not match the updates: {where}."
                         f"{_swapped_value_and_grad_hint(reference, tree_spec)}")
    return tree_leaves


def _swapped_value_and_grad_hint(updates: Any, expected: optree.PyTreeSpec) -> str:
    """A hint when ``updates`` looks like a loss value, or a ``(grad, value)`` pair.

    ``torch.func.grad_and_value`` returns ``(grad, value)``, the reverse of
    ``jax.value_and_grad``: unpacking it in JAX's order hands the loss to ``update``.
    """
    is_value = lambda x: isinstance(x, torch.Tensor) and x.ndim == 0
    pair = isinstance(updates, tuple) and len(updates) == 2
    if not (is_value(updates) or (pair and any(map(is_value, updates))
                                  and any(treespec(x) == expected for x in updates))):
        return ""
    return (" The updates look like a loss value (or a (grad, value) pair): note that "
            "torch.func.grad_and_value returns (grad, value), the reverse of "
            "jax.value_and_grad's (value, grad).")


def check_same_structure(expected: Any, actual: Any, what: str) -> None:
    """Raises ``ValueError`` naming the first differing path if the trees' structures differ."""
    if treespec(expected) != treespec(actual):
        raise ValueError(f"The structure of {what} does not match: "
                         f"{first_difference(expected, actual, 'the expected tree', what)}.")


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
    return bool(xs) and isinstance(xs[0], torch.Tensor) and _is_batched_tensor(xs[0])


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
# Scalars.


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
        return _cpu_tensor_scalar(scalar, xs) if tensor_scalar else scalar
    if 0 in attributes("ndim", xs) and any(x.ndim == 0 and x.dtype != scalar.dtype for x in xs):
        return [scalar.to(x.dtype) for x in xs]
    if scalar.requires_grad or not tensor_scalar:
        return [scalar] * len(xs)
    return scalar


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
            or set(map(type, xs)) - _PLAIN_TENSOR_TYPES):
        return scalar
    dtypes = set(attributes("dtype", xs))
    if len(dtypes) != 1 or not dtypes <= _OWN_PRECISION_DTYPES or not all(attributes("is_cpu", xs)):
        return scalar
    return torch.tensor(scalar, dtype=xs[0].dtype)


# ----------------------------------------------------------------------------------------------
# Elementwise arithmetic on lists of leaves. All pure.


def add(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """``x + y`` per leaf; ``ys`` is a list of leaves or a scalar."""
    if not xs:
        return []
    return list(foreach("add", xs, _operand(ys, xs)))


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


def div(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """``x / y`` per leaf."""
    if not xs:
        return []
    return list(foreach("div", xs, _operand(ys, xs, tensor_scalar=True)))


def add_scaled(xs: Leaves, scale: ScalarOrLeaves, ys: Leaves) -> Leaves:
    """``x + scale * y`` per leaf, in one pass when ``scale`` is a Python number.

    ``scale`` may also be a tensor or one scalar per leaf (as :func:`scalar_like` returns).
    """
    if not xs:
        return []
    if isinstance(scale, (torch.Tensor, list)):
        return add(xs, mul(ys, scale))
    return list(foreach("add", xs, ys, alpha=scale))


def neg(xs: Leaves) -> Leaves:
    """``-x`` per leaf."""
    return list(foreach("neg", xs)) if xs else []


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


def sqrt(xs: Leaves) -> Leaves:
    """``sqrt(x)`` per leaf."""
    return list(foreach("sqrt", xs)) if xs else []


def square(xs: Leaves) -> Leaves:
    """``x * x`` per leaf."""
    return mul(xs, xs)


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


def is_distributed(xs: Sequence[Any]) -> bool:
    """Whether any of ``xs`` is a ``torch.distributed.tensor.DTensor`` (e.g. an FSDP2 shard).

    Such leaves take the registered DTensor operators where a ``torch._foreach_*`` kernel has
    no sharding strategy; plain tensors keep the batched kernels. Costs nothing when
    ``torch.distributed.tensor`` was never imported (then no DTensor can exist).
    """
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and any(isinstance(x, module.DTensor) for x in xs)


def zeros_like(xs: Leaves, dtype: torch.dtype | None = None) -> Leaves:
    """Zeros shaped (and, unless ``dtype`` is given, typed) like each leaf."""
    return [torch.zeros_like(x, dtype=dtype) for x in xs]


def where(condition: torch.Tensor | bool, xs: Leaves, ys: Leaves) -> Leaves:
    """Selects ``xs`` where ``condition`` holds else ``ys`` (``lax.select`` without a host sync)."""
    if not isinstance(condition, torch.Tensor):
        condition = torch.tensor(bool(condition), device=xs[0].device if xs else None)
    return [torch.where(condition, x, y) for x, y in zip(xs, ys)]


def ema(moments: Leaves, values: Leaves, decay: Scalar) -> Leaves:
    """Exponential moving average ``(1 - decay) * value + decay * moment`` per leaf."""
    if not moments:
        return []
    if isinstance(decay, torch.Tensor):
        return add(mul(values, 1 - decay), mul(moments, decay))
    return list(foreach("add", foreach("mul", values, 1 - decay), moments,
                                   alpha=decay))


def cast(xs: Leaves, dtype: torch.dtype | None) -> Leaves:
    """Casts each leaf to ``dtype`` (no copy when already of that dtype; ``None`` keeps it)."""
    if dtype is None:
        return list(xs)
    return [x.to(dtype) for x in xs]


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
    return sum_scalars([torch.vdot(x.reshape(-1), y.reshape(-1)) for x, y in zip(xs, ys)])



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


def map_over_prefix(fn: Callable[..., Any], prefix: Any, *trees: Any, what: str) -> Any:
    """``tree_map`` where each leaf of ``prefix`` meets whole subtrees of ``trees``.

    Masks and label trees are prefixes of the params tree: their leaves stand for whole
    subtrees. A ``prefix`` that is not a prefix of every tree in ``trees`` raises a ValueError
    naming ``what`` and the first path where the structures part.
    """
    try:
        return tree_map(fn, prefix, *trees)
    except ValueError:
        for tree in trees:
            errors = optree.prefix_errors(prefix, tree, none_is_leaf=NONE_IS_LEAF,
                                          namespace=NAMESPACE)
            if errors:
                raise errors[0](what) from None
        raise


# ----------------------------------------------------------------------------------------------
# In-place counterparts, for the opt-in ``inplace=True`` paths of transforms. Each one runs the
# same kernels as its pure twin above, so both paths give bit-identical numbers.


def add_scaled_(xs: Leaves, scale: Scalar, ys: Leaves) -> Leaves:
    """Writes ``x + scale * y`` into each ``x``; the in-place twin of :func:`add_scaled`."""
    if not xs:
        return xs
    if isinstance(scale, torch.Tensor):
        foreach("add_", xs, mul(ys, scale))
    else:
        foreach("add_", xs, ys, alpha=scale)
    return xs


def mul_(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """Writes ``x * y`` into each ``x``; the in-place twin of :func:`mul`."""
    if xs:
        foreach("mul_", xs, _operand(ys, xs, tensor_scalar=True))
    return xs


def div_(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """Writes ``x / y`` into each ``x``; the in-place twin of :func:`div`."""
    if xs:
        foreach("div_", xs, _operand(ys, xs, tensor_scalar=True))
    return xs


def clamp_(xs: Leaves, low: Scalar, high: Scalar) -> Leaves:
    """Writes ``min(max(x, low), high)`` into each ``x``; the twin of ``minimum(maximum(..))``."""
    if xs:
        foreach("maximum_", xs, _bound(low, xs))
        foreach("minimum_", xs, _bound(high, xs))
    return xs


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


def same_shapes(xs: Leaves, ys: Leaves) -> bool:
    """Whether the two lists hold leaves of equal shapes, pairwise: one C-level pass in eager
    mode (``Tensor.is_same_size``; building ``torch.Size`` objects costs more), shape
    comparisons Dynamo resolves at trace time under ``torch.compile``."""
    if torch.compiler.is_compiling():
        return all(x.shape == y.shape for x, y in zip(xs, ys))
    return all(map(torch.Tensor.is_same_size, xs, ys))


def same_dtypes(xs: Leaves, ys: Leaves) -> bool:
    """Whether the two lists hold leaves of equal dtypes, pairwise (in-place paths need it)."""
    return [x.dtype for x in xs] == [y.dtype for y in ys]


# ----------------------------------------------------------------------------------------------
# Input checks, weakly typed scalars and single-pass kernels for ``_src/transform.py``.


def is_inexact(x: Any) -> bool:
    """Whether ``x`` is a floating or complex tensor (what JAX calls inexact)."""
    return isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())


def float_leaves(tree: Any, what: str = "updates") -> tuple[Leaves, optree.PyTreeSpec]:
    """Flattens ``tree``, checking that every leaf is a floating-point (or complex) tensor.

    Args:
      tree: the tree to flatten, e.g. the incoming updates of a transformation.
      what: a name for ``tree`` used in the error message.

    Returns:
      The leaves and the structure, as :func:`flatten`.

    Raises:
      TypeError: naming the path and dtype of the first leaf that is not an inexact tensor.
    """
    xs, spec = flatten(tree)
    if all(map(torch.is_floating_point, xs)) or all(map(is_inexact, xs)):
        return xs, spec
    paths, path_leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=NONE_IS_LEAF,
                                                          namespace=NAMESPACE)
    path, leaf = next((p, x) for p, x in zip(paths, path_leaves) if not is_inexact(x))
    kind = leaf.dtype if isinstance(leaf, torch.Tensor) else type(leaf).__name__
    raise TypeError(f"The leaf of {what} at path {path_str(path)} is {kind}; a floating-point "
                    "or complex tensor is required.")


def is_recording(*groups: Any) -> bool:
    """Whether autograd records operations on ``groups`` (lists of tensors, or tensors).

    Fast paths that write into buffers they just allocated are only taken when this is False:
    in-place kernels would overwrite values that a backward pass needs.
    """
    if not torch.is_grad_enabled():
        return False
    for group in groups:
        if isinstance(group, torch.Tensor):
            if group.requires_grad:
                return True
        elif isinstance(group, (list, tuple)) and any(attributes("requires_grad", group)):
            return True
    return False


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


def abs_sq(xs: Leaves) -> Leaves:
    """``|x| ** 2`` per leaf (``x * x`` for real leaves, a real result for complex ones)."""
    if not any(x.is_complex() for x in xs):
        return square(xs)
    return [(x.conj() * x).real if x.is_complex() else x * x for x in xs]


def rsqrt(xs: Leaves) -> Leaves:
    """``1 / sqrt(x)`` per leaf."""
    return list(foreach("rsqrt", xs)) if xs else []


def norms(xs: Leaves) -> Leaves:
    """The Euclidean (Frobenius) norm of each leaf, as 0-d tensors."""
    return list(foreach("norm", xs)) if xs else []


def clone(xs: Leaves) -> Leaves:
    """Fresh copies of the leaves, to be written into by in-place kernels."""
    return [x.clone() for x in xs]


def moving_average(moments: Leaves, values: Leaves, decay: float, *,
                   inplace: bool = False) -> Leaves:
    """``decay * moment + (1 - decay) * value`` per leaf, written into ``moments`` if ``inplace``.

    The moments are scaled, then the values added: both forms run the same kernels, so they
    give the same bits. Not ``lerp``: an infinite moment stays infinite at the next finite
    value, as with Optax's ``(1 - decay) * value + decay * moment``.
    """
    if not moments:
        return moments
    if inplace:
        scaled = mul_(moments, decay)
    else:
        scaled = mul(moments, decay)
        if not same_shapes(scaled, values):
            # Values wider than the moments (JAX broadcasts them): new moments of their shape.
            return list(foreach("add", scaled, values, alpha=1 - decay))
    foreach("add_", scaled, values, alpha=1 - decay)
    return scaled


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


def neg_(xs: Leaves) -> Leaves:
    """Writes ``-x`` into each ``x``."""
    if xs:
        foreach("neg_", xs)
    return xs


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


def add_(xs: Leaves, ys: ScalarOrLeaves) -> Leaves:
    """Writes ``x + y`` into each ``x``; the in-place twin of :func:`add`."""
    if xs:
        foreach("add_", xs, _operand(ys, xs))
    return xs


def sqrt_(xs: Leaves) -> Leaves:
    """Writes ``sqrt(x)`` into each ``x``."""
    if xs:
        foreach("sqrt_", xs)
    return xs


def reciprocal_(xs: Leaves) -> Leaves:
    """Writes ``1 / x`` into each ``x``."""
    if xs:
        foreach("reciprocal_", xs)
    return xs


# ----------------------------------------------------------------------------------------------
# One scalar per leaf (block norms, clipping factors), computed in a few batched ops.


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


def ema_in_dtypes(moments: Leaves, values: Leaves, decay: Scalar) -> Leaves:
    """``(1 - decay) * value + decay * moment`` per leaf, for a tensor ``decay``.

    The scalar arithmetic ``1 - decay`` runs in ``decay``'s own dtype, as JAX computes on a
    schedule's value or an injected hyperparameter, and each scalar is then rounded to the
    operand it multiplies (the weak-type rule of ``building_blocks.dtypes``). Moments and
    values may differ in dtype (``mu_dtype``); the sum then promotes.
    """
    return add(mul(values, scalar_like(1 - decay, values)),
               mul(moments, scalar_like(decay, moments)))


def ravel(xs: Leaves) -> torch.Tensor:
    """All leaves concatenated into one flat vector in their promoted dtype.

    The vector of JAX's ``flatten_util.ravel_pytree``, in the leaves' flattening order;
    :func:`unravel` is its inverse. DTensor leaves are gathered whole (``full_tensor``) on every
    rank: a vector of all parameters is what the callers' math (projections that sort it,
    dense Hessians) works on, and DTensor cannot flatten an unevenly sharded leaf.
    """
    if not xs:
        return torch.zeros(0)
    dtype = xs[0].dtype
    for x in xs[1:]:
        dtype = torch.promote_types(dtype, x.dtype)
    if is_distributed(xs):
        xs = [gathered(x) for x in xs]
    return torch.cat([x.reshape(-1).to(dtype) for x in xs])


def reduced_for_storage(xs: Leaves) -> Leaves:
    """The leaves with every pending DTensor reduction carried out, for keeping in a state.

    A reduction over a sharded axis (the column means of a matrix sharded by rows) gives a
    DTensor with a ``Partial`` placement: each rank holds a whole-size partial result. Stored
    as it is, a state would keep the whole vector on every rank; reduce-scattered to
    ``Shard(0)`` (``Replicate`` for 0-d values), each rank keeps its part and the next step
    gathers it where the math needs the whole. Plain tensors are returned as they are.
    """
    if not is_distributed(xs):
        return list(xs)
    module = sys.modules["torch.distributed.tensor"]
    partial = sys.modules["torch.distributed.tensor.placement_types"].Partial
    result = []
    for x in xs:
        if isinstance(x, module.DTensor) and any(isinstance(p, partial) for p in x.placements):
            whole = module.Shard(0) if x.ndim else module.Replicate()
            x = x.redistribute(placements=[whole if isinstance(p, partial) else p
                                           for p in x.placements])
        result.append(x)
    return result


def gathered(x: torch.Tensor) -> torch.Tensor:
    """The whole value of a DTensor as a plain tensor on every rank (a plain tensor as it is).

    For a replicated 0-d DTensor (a global norm, an inner product) nothing is communicated.
    """
    full_tensor = getattr(x, "full_tensor", None)
    return full_tensor() if full_tensor is not None else x


def unravel(vector: torch.Tensor, like: Leaves) -> Leaves:
    """Splits a flat ``vector`` into leaves shaped and typed like ``like`` (undoes :func:`ravel`).

    Raises:
      ValueError: if ``vector`` is not 1-D with as many elements as the leaves together.
    """
    sizes = [x.numel() for x in like]
    if vector.ndim != 1 or vector.shape[0] != sum(sizes):
        raise ValueError(f"Expected a vector of {sum(sizes)} elements, got shape "
                         f"{tuple(vector.shape)}.")
    pieces = [piece.reshape(x.shape).to(x.dtype)
              for piece, x in zip(torch.split(vector, sizes), like)]
    if not is_distributed(like):
        return pieces
    # Each rank keeps its own shard of the whole value it holds: no communication.
    distribute = sys.modules["torch.distributed.tensor"].distribute_tensor
    return [distribute(piece, x.device_mesh, x.placements, src_data_rank=None)
            if hasattr(x, "device_mesh") else piece for piece, x in zip(pieces, like)]
