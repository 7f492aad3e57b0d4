"""Reading and editing optimizer states by field name (mirrors Optax's _state_utils.py).

Paths are tuples of key entries: :class:`DictKey`, :class:`SequenceKey`, :class:`GetAttrKey`
(the roles of ``jax.tree_util``'s entries) and :class:`NamedTupleKey` for NamedTuple fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional, Protocol, Union, runtime_checkable

import optree

from optax_compat._runtime import tree_math as tm
from optax_compat._src import base


@dataclasses.dataclass(frozen=True)
class NamedTupleKey:
    """A path entry naming the field ``name`` of a NamedTuple of class ``tuple_name``."""

    tuple_name: str
    name: str

    def __str__(self) -> str:
        return f"{self.tuple_name}.{self.name}"


@dataclasses.dataclass(frozen=True)
class DictKey:
    """A path entry for the value at ``key`` of a dict."""

    key: Any

    def __str__(self) -> str:
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """A path entry for the element ``idx`` of a list or tuple."""

    idx: int

    def __str__(self) -> str:
        return f"[{self.idx}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """A path entry for the attribute ``name`` of a registered node."""

    name: str

    def __str__(self) -> str:
        return f".{self.name}"


KeyEntry = Union[DictKey, SequenceKey, GetAttrKey, NamedTupleKey]
KeyPath = tuple[KeyEntry, ...]


@runtime_checkable
class Initable(Protocol):
    """An object with an ``init(params)`` method, such as a :class:`GradientTransformation`."""

    def init(self, params: base.Params) -> base.OptState:
        """Returns the initial state."""


class ParamsPlaceholder:
    """Stands for the whole params tree when tracing where ``init`` puts params-shaped trees.

    It is a pytree node without children, so that ``init`` maps over it like over an empty
    params tree and returns placeholders wherever it builds a params-shaped tree.
    """


optree.register_pytree_node(ParamsPlaceholder, lambda _: ((), None, ()),
                            lambda _, children: ParamsPlaceholder(), namespace=tm.NAMESPACE)


def _is_named_tuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(node, "_fields")


def _children_with_keys(node: Any) -> Optional[list[tuple[KeyEntry, Any]]]:
    """The children of an inner node with their path entries; ``None`` for a leaf."""
    if _is_named_tuple(node):
        name = type(node).__name__
        return [(NamedTupleKey(name, f), getattr(node, f)) for f in node._fields]
    if isinstance(node, dict):
        return [(DictKey(k), node[k]) for k in sorted(node, key=_sort_key)]
    if isinstance(node, (list, tuple)):
        return [(SequenceKey(i), child) for i, child in enumerate(node)]
    if node is None or isinstance(node, ParamsPlaceholder) or optree.tree_is_leaf(
            node, none_is_leaf=tm.NONE_IS_LEAF, namespace=tm.NAMESPACE):
        return None
    children, _, entries, _ = optree.tree_flatten_one_level(
        node, none_is_leaf=tm.NONE_IS_LEAF, namespace=tm.NAMESPACE)
    return [(GetAttrKey(str(e)), c) for e, c in zip(entries, children)]


def _sort_key(key: Any) -> tuple[str, Any]:
    return (type(key).__name__, key)


def _has_any_key(node: Any, keys: tuple[Any, ...]) -> bool:
    if _is_named_tuple(node):
        return any(k in node._fields or k == type(node).__name__ for k in keys)
    return isinstance(node, dict) and any(k in node for k in keys)


def _entry_name(entry: KeyEntry) -> Any:
    if isinstance(entry, DictKey):
        return entry.key
    if isinstance(entry, SequenceKey):
        return entry.idx
    return entry.name


def _walk(tree: Any, key: Any, path: KeyPath) -> list[tuple[KeyPath, Any]]:
    """All values stored under ``key`` in ``tree``, outermost first, with their paths."""
    found = []
    if _has_any_key(tree, (key,)):
        if _is_named_tuple(tree) and key == type(tree).__name__:
            found.append((path, tree))
        elif _is_named_tuple(tree):
            found.append(((*path, NamedTupleKey(type(tree).__name__, key)), getattr(tree, key)))
        else:
            found.append(((*path, DictKey(key)), tree[key]))
    children = _children_with_keys(tree)
    for entry, child in children or ():
        found.extend(_walk(child, key, (*path, entry)))
    return found


def tree_get_all_with_path(
    tree: base.PyTree, key: Any,
    filtering: Optional[Callable[[KeyPath, Any], bool]] = None,
) -> list[tuple[KeyPath, Any]]:
    """Every value stored under the field or dict key ``key`` (or a NamedTuple named ``key``).

    Args:
      tree: typically an optimizer state.
      key: a NamedTuple field name, a NamedTuple class name, or a dict key.
      filtering: keep only the ``(path, value)`` pairs for which this returns True.

    Returns:
      ``(path, value)`` pairs.
    """
    found = _walk(tree, key, ())
    if filtering is not None:
        found = [(path, value) for path, value in found if filtering(path, value)]
    return found


def tree_get(tree: base.PyTree, key: Any, default: Optional[Any] = None,
             filtering: Optional[Callable[[KeyPath, Any], bool]] = None) -> Any:
    """The single value stored under ``key`` in ``tree`` (``default`` if there is none).

    Raises:
      KeyError: if several values match.
    """
    found = tree_get_all_with_path(tree, key, filtering=filtering)
    if len(found) > 1:
        raise KeyError(f"Found multiple values for '{key}' in {tree}.")
    return found[0][1] if found else default


def tree_set(tree: base.PyTree, filtering: Optional[Callable[[KeyPath, Any], bool]] = None,
             /, **kwargs: Any) -> base.PyTree:
    """A copy of ``tree`` with the values under each keyword's key replaced.

    Args:
      tree: typically an optimizer state.
      filtering: replace only where ``filtering(path, value)`` is True.
      **kwargs: ``key=new_value`` pairs (field names, dict keys or NamedTuple class names).

    Returns:
      The new tree; ``tree`` is not modified.

    Raises:
      KeyError: if a key matches nothing.
    """
    for key in kwargs:
        if not tree_get_all_with_path(tree, key, filtering):
            where = " given the filtering operation" if filtering else ""
            raise KeyError(f"Found no values matching '{key}'{where} in {tree}")

    def replace(node: Any, path: KeyPath) -> Any:
        if _is_named_tuple(node) and type(node).__name__ in kwargs and (
                filtering is None or filtering(path, node)):
            return kwargs[type(node).__name__]
        children = _children_with_keys(node)
        if children is None:
            return node
        new_children = []
        for entry, child in children:
            name = _entry_name(entry)
            child_path = (*path, entry)
            if (isinstance(entry, (NamedTupleKey, DictKey)) and name in kwargs
                    and (filtering is None or filtering(child_path, child))):
                new_children.append(kwargs[name])
            else:
                new_children.append(replace(child, child_path))
        return _rebuild(node, children, new_children)

    return replace(tree, ())


def _rebuild(node: Any, children: list[tuple[KeyEntry, Any]], new_children: list[Any]) -> Any:
    if _is_named_tuple(node):
        return type(node)(*new_children)
    if isinstance(node, dict):
        by_key = {_entry_name(e): c for (e, _), c in zip(children, new_children)}
        return type(node)((k, by_key[k]) for k in node)
    if isinstance(node, (list, tuple)):
        return type(node)(new_children)
    _, metadata, _, unflatten = optree.tree_flatten_one_level(
        node, none_is_leaf=tm.NONE_IS_LEAF, namespace=tm.NAMESPACE)
    return unflatten(metadata, new_children)


def tree_map_params(
    initable: Union[Callable[[base.Params], base.OptState], Initable],
    f: Callable[..., Any],
    state: base.OptState,
    /,
    *rest: Any,
    transform_non_params: Optional[Callable[..., Any]] = None,
    is_leaf: Optional[Callable[[base.Params], bool]] = None,
) -> base.OptState:
    """Applies ``f`` to the parts of an optimizer state that have the shape of the params.

    ``initable`` is called on a placeholder to learn where ``init`` puts params-shaped trees
    (moments, traces); ``f`` maps their leaves, everything else goes through
    ``transform_non_params`` (or is kept).

    Args:
      initable: the transformation (or its ``init``) that produced ``state``.
      f: applied to each params-shaped leaf (with the matching leaves of ``rest``).
      state: the optimizer state.
      *rest: more trees with the structure of the params, passed to ``f``.
      transform_non_params: applied to every other leaf.
      is_leaf: passed to the tree map over params-shaped subtrees.

    Returns:
      The new state.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.adam(learning_rate=1e-3)
      >>> state = tx.init({"w": torch.tensor([1.0, 2.0])})
      >>> half = optax.tree_map_params(tx, lambda v: v.to(torch.float16), state)
      >>> half[0].mu["w"]
      tensor([0., 0.], dtype=torch.float16)
      >>> half[0].count  # not params-shaped: kept
      tensor(0, dtype=torch.int32)
    """
    placeholder = ParamsPlaceholder()
    init = initable.init if isinstance(initable, Initable) else initable
    skeleton = init(placeholder)

    def map_params(marker: Any, value: Any) -> Any:
        if isinstance(marker, ParamsPlaceholder):
            return optree.tree_map(f, value, *rest, is_leaf=is_leaf, none_is_leaf=False)
        if transform_non_params is not None:
            return transform_non_params(value)
        return value

    return tm.tree_map(map_params, skeleton, state,
                       is_leaf=lambda v: isinstance(v, ParamsPlaceholder))
