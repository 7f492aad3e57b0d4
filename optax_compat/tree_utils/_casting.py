"""Casting pytrees to dtypes (mirrors ``optax/tree_utils/_casting.py``)."""

from __future__ import annotations

import functools
from typing import Any, Optional, TypeVar

import optree
import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm

T = TypeVar("T")


def tree_cast(tree: Any, dtype: Optional[torch.dtype]) -> Any:
    """Casts every leaf to ``dtype``; returns ``tree`` unchanged when ``dtype`` is ``None``."""
    if dtype is None:
        return tree
    dtype = bb.canonical_dtype(dtype)
    return tm.tree_map(lambda x: x.to(dtype), tree)


def tree_cast_like(tree: T, other_tree: Any) -> T:
    """Casts each leaf of ``tree`` to the dtype of the matching leaf of ``other_tree``."""
    return tm.tree_map(lambda x, o: x.to(o.dtype) if hasattr(o, "dtype") else x, tree,
                       other_tree)


def _dtype_of(x: Any) -> torch.dtype:
    return x.dtype if isinstance(x, torch.Tensor) else bb.as_weak(x).dtype


def _higher(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    promoted = torch.promote_types(a, b)
    if promoted not in (a, b):
        raise ValueError(f"Cannot compare dtypes {a} and {b}: neither promotes to the other.")
    return promoted


def _lower(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    return b if _higher(a, b) == a else a


def tree_dtype(tree: Any, mixed_dtype_handler: Optional[str] = None) -> torch.dtype:
    """The dtype of the leaves of ``tree``.

    Args:
      tree: a tree of tensors.
      mixed_dtype_handler: ``None`` requires one dtype for all leaves; ``'promote'`` returns
        their promoted dtype; ``'highest'``/``'lowest'`` the highest/lowest in the promotion
        order (an error if two leaves are not ordered).

    Returns:
      A ``torch.dtype`` (JAX's default float for an empty tree, see ``optax_compat.config``).

    Raises:
      ValueError: for mixed dtypes with ``mixed_dtype_handler=None``, unordered dtypes, or an
        unknown handler.
    """
    paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=tm.NONE_IS_LEAF,
                                                     namespace=tm.NAMESPACE)
    if not leaves:
        return bb.default_float()
    dtypes = [_dtype_of(x) for x in leaves]
    if mixed_dtype_handler is None:
        for path, dtype in zip(paths, dtypes):
            if dtype != dtypes[0]:
                raise ValueError(f"Expected dtype={dtypes[0]} for {path} but got {dtype}.")
        return dtypes[0]
    reducers = {"promote": torch.promote_types, "highest": _higher, "lowest": _lower}
    if mixed_dtype_handler not in reducers:
        raise ValueError(f"Invalid value for mixed_dtype_handler={mixed_dtype_handler!r}, "
                         "possible values are: None, 'promote', 'highest', 'lowest'.")
    return functools.reduce(reducers[mixed_dtype_handler], dtypes)
