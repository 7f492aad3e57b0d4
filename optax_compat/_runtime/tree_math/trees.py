"""Trees: flattening and unflattening with optree, the shortcuts that build tree structures
while Dynamo traces, structure checks and the text of their errors, and checks on lists of leaves
(types, shapes, dtypes, autograd).

Pytrees are optree's with ``None`` not a leaf (Optax's convention) and sorted dict keys
(:data:`NONE_IS_LEAF`, :data:`NAMESPACE`). Imports no other module of this package.
"""

from __future__ import annotations

import functools
import operator
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import optree
import torch

Leaves = list[torch.Tensor]

NONE_IS_LEAF = False
NAMESPACE = "optax_compat"  # sees global registrations too, plus our private node types
PLAIN_TENSOR_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})
# Where Dynamo keeps its Python substitute for optree (its ``PyTreeSpec``, the structures
# ``optree.tree_flatten`` returns while tracing); loaded with Dynamo.
_SUBSTITUTE_MODULE = "torch._dynamo.polyfills.pytree"
_SUBSTITUTE_FIELDS = ("_children", "_type", "_metadata", "_entries", "_unflatten_func",
                      "none_is_leaf", "namespace")
# Its pure-Python versions of optree's leaf test and dict (un)flattening.
_SUBSTITUTE_FUNCTIONS = ("tree_is_leaf", "dict_flatten", "dict_unflatten")


# ----------------------------------------------------------------------------------------------
# Flattening and unflattening.


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
        if len(tree) > 1 and PLAIN_TENSOR_TYPES.issuperset(map(type, tree)):
            return list(tree), _sequence_spec(kind, len(tree))
    elif kind is dict and len(tree) > 1:
        values = list(tree.values())
        if PLAIN_TENSOR_TYPES.issuperset(map(type, values)):
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
        return _same_node(a, b)
    if _is_traced(a) and _is_traced(b):
        return _same_traced_structure(a, b)
    return a == b


def _same_node(a: Any, b: Any) -> bool:
    """Whether two structures of Dynamo's optree substitute have the same root node."""
    return (a.type is b.type and a.num_leaves == b.num_leaves
            and a.none_is_leaf == b.none_is_leaf and a.namespace == b.namespace
            and a._metadata == b._metadata and a._entries == b._entries)


def _same_traced_structure(a: Any, b: Any) -> bool:
    """``a == b`` for structures of Dynamo's optree substitute, node by node: its own ``==``
    (a dataclass's) compares the nodes' unflatten functions, which Dynamo in torch 2.11
    cannot trace."""
    return (_same_node(a, b) and a.num_nodes == b.num_nodes
            and len(a._children) == len(b._children)
            and all(_same_traced_structure(x, y) for x, y in zip(a._children, b._children)))


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
# Shortcuts while Dynamo traces: tree structures built here, not by its optree substitute.


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
    if not all(type(child) in PLAIN_TENSOR_TYPES for child in values):
        return None
    return optree.tree_flatten_one_level(tree, none_is_leaf=none_is_leaf, namespace=NAMESPACE)


def _is_traced_one_level(spec: Any) -> bool:
    """Whether Dynamo is tracing and ``spec`` is a structure of its optree substitute with two
    or more children, all leaves (a leaf is the one node with a leaf and no children)."""
    return _is_traced(spec) and spec.num_leaves > 1 and spec.num_nodes == spec.num_leaves + 1


def _is_traced(spec: Any) -> bool:
    """Whether Dynamo is tracing and ``spec`` is a structure of its optree substitute."""
    return torch.compiler.is_dynamo_compiling() and type(spec) is _substitute_spec_type()


def _substitute_spec_type() -> type | None:
    """The ``PyTreeSpec`` class of Dynamo's optree substitute, if Dynamo is loaded and the
    class has the fields this module builds and reads, in this order; else ``None`` (the
    shortcuts above are then off and optree's substitute does the work)."""
    spec_type = getattr(sys.modules.get(_SUBSTITUTE_MODULE), "PyTreeSpec", None)
    fields = tuple(getattr(spec_type, "__dataclass_fields__", ()))
    return spec_type if fields[:len(_SUBSTITUTE_FIELDS)] == _SUBSTITUTE_FIELDS else None


# ----------------------------------------------------------------------------------------------
# Structure checks and the text of their errors.


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
# Checks on lists of leaves: attributes, dtypes, shapes, autograd.


def attributes(name: str, xs: Iterable[Any]) -> list[Any]:
    """``[getattr(x, name) for x in xs]``: one C-level pass in eager mode (the per-step checks
    over many leaves cost a Python call each otherwise), a loop Dynamo traces under
    ``torch.compile`` (it cannot call ``operator.attrgetter``)."""
    if torch.compiler.is_compiling():
        return [getattr(x, name) for x in xs]
    return list(map(operator.attrgetter(name), xs))


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
