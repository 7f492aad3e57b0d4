"""Which transformations may run on flat buffers: elementwise maps and global reductions.

A transformation whose ``update`` treats its leaves as one long vector — every operation acts
element by element, or reduces over the whole tree at once (a global norm, a tree dot
product) — gives the same numbers (up to the summation order of those reductions) on the
tree of its parameters and on a tree of 1-D buffers holding the same values back to back.
:func:`optax_compat.fused_step` runs such transformations on per-(dtype, device) flat
buffers, the way FSDP's flat parameters and ZeRO do.

A transformation declares it by decorating its ``update`` with :func:`elementwise`;
combinators and wrappers declare it iff their inner transformations do, with
:func:`elementwise_if`; :func:`not_elementwise` says why a transformation cannot (it reads
leaf shapes, per-leaf norms or a per-leaf mask). Undeclared transformations are not
flat-safe. Markers are set before ``update`` is wrapped (``functools.wraps`` carries them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, TypeVar, Union

UpdateFn = TypeVar("UpdateFn", bound=Callable[..., Any])

_MARK = "elementwise"


def elementwise(update_fn: UpdateFn) -> UpdateFn:
    """Declares that ``update_fn`` acts elementwise or on global reductions; returns it."""
    setattr(update_fn, _MARK, True)
    return update_fn


def not_elementwise(reason: str) -> Callable[[UpdateFn], UpdateFn]:
    """A decorator recording why ``update_fn`` cannot run on flat buffers.

    Args:
      reason: what the transformation does that depends on the leaves' layout, as the end of
        a sentence whose subject is the transformation (e.g. ``"factors each matrix by its
        shape"``).
    """
    def mark(update_fn: UpdateFn) -> UpdateFn:
        setattr(update_fn, _MARK, f"{_name(update_fn)} {reason}")
        return update_fn

    return mark


def elementwise_if(*inner: Any) -> Callable[[UpdateFn], UpdateFn]:
    """A decorator declaring ``update_fn`` flat-safe iff every transformation in ``inner`` is.

    Args:
      *inner: the inner transformations (objects with an ``update``) or update functions.
    """
    reason = next(filter(None, map(why_not_elementwise, inner)), None)

    def mark(update_fn: UpdateFn) -> UpdateFn:
        setattr(update_fn, _MARK, True if reason is None else reason)
        return update_fn

    return mark


def why_not_elementwise(tx_or_update: Any) -> Optional[str]:
    """``None`` if the transformation (or update function) is flat-safe, else why not."""
    update_fn = getattr(tx_or_update, "update", tx_or_update)
    mark: Union[bool, str, None] = getattr(update_fn, _MARK, None)
    if mark is True:
        return None
    if isinstance(mark, str):
        return mark
    return f"{_name(update_fn)} is not declared elementwise"


def _name(update_fn: Callable[..., Any]) -> str:
    """The transformation an update function belongs to (``scale_by_adam`` for
    ``scale_by_adam.<locals>.update_fn``)."""
    qualname = getattr(update_fn, "__qualname__", None) or type(update_fn).__name__
    return qualname.split(".<locals>")[0]
