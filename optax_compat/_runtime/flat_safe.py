"""Which transformations :func:`optax_compat.fused_step` may run on packed buffers, and how.

Two layouts pack a tree of many leaves into few large tensors:

``FLAT``
  one 1-D buffer per (dtype, device) holding every leaf back to back, the way FSDP's flat
  parameters and ZeRO do. Valid for a transformation whose ``update`` treats its leaves as one
  long vector: every operation acts element by element, or reduces over the whole tree at once
  (a global norm, a tree dot product). It then gives the same numbers (up to the summation
  order of those reductions) on the buffers as on the leaves.
``STACKED``
  the leaves of one (dtype, device, shape) stacked along a new first axis, the update run on
  each stack under ``torch.func.vmap``. Valid for a transformation that acts leaf by leaf:
  whatever it computes for a leaf (a norm, a row mean, a trust ratio, a matrix product) reads
  that leaf, its state and its parameter only, plus scalars shared by all leaves (the step
  count, a schedule's value).

A transformation declares what it does by decorating its ``update``:

* :func:`elementwise`: element by element only, so both layouts;
* :func:`global_reduction`: elementwise and reductions over the whole tree, ``FLAT`` only;
* :func:`per_leaf`: reductions or shapes of single leaves, ``STACKED`` only;
* :func:`elementwise_if`: combinators and wrappers, the layouts all their inner ones allow.

Undeclared transformations allow neither. The layouts are a field of the transformation's
capability record (:mod:`.capabilities`), which ``functools.wraps`` carries to wrappers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, TypeVar

from optax_compat._runtime.capabilities import capabilities_of, declare

UpdateFn = TypeVar("UpdateFn", bound=Callable[..., Any])

FLAT = "flat"
STACKED = "stacked"
LAYOUTS = (FLAT, STACKED)


def _marker(**reasons: Optional[str]) -> Callable[[UpdateFn], UpdateFn]:
    """A decorator setting the marker to ``reasons`` (each ``{name}`` filled with the
    transformation's name)."""
    def mark(update_fn: UpdateFn) -> UpdateFn:
        name = _name(update_fn)
        return declare(update_fn, layouts={layout: None if reason is None else f"{name} {reason}"
                                           for layout, reason in reasons.items()})

    return mark


def elementwise(update_fn: UpdateFn) -> UpdateFn:
    """Declares that ``update_fn`` acts element by element (both layouts); returns it."""
    return _marker(flat=None, stacked=None)(update_fn)


def global_reduction(what: str) -> Callable[[UpdateFn], UpdateFn]:
    """Declares a transformation that is elementwise but for reductions over the whole tree.

    Args:
      what: the reduction, as the end of a sentence whose subject is the transformation (e.g.
        ``"divides by the global norm"``); the reason the ``STACKED`` layout is refused.
    """
    return _marker(flat=None, stacked=what)


def per_leaf(what: str) -> Callable[[UpdateFn], UpdateFn]:
    """Declares a transformation that acts leaf by leaf but reads each leaf's shape or reduces
    over it.

    Args:
      what: what it does, as the end of a sentence whose subject is the transformation (e.g.
        ``"factors each matrix by its shape"``); the reason the ``FLAT`` layout is refused.
    """
    return _marker(flat=what, stacked=None)


def elementwise_if(*inner: Any, global_reduction: Optional[str] = None,
                   ) -> Callable[[UpdateFn], UpdateFn]:
    """A decorator declaring ``update_fn`` valid in the layouts every one of ``inner`` is.

    Args:
      *inner: the inner transformations (objects with an ``update``) or update functions.
      global_reduction: what the wrapper itself reduces over the whole tree, if anything (as
        for :func:`global_reduction`); the ``STACKED`` layout is then refused.
    """
    reasons = {layout: next(filter(None, (why_not(tx, layout) for tx in inner)), None)
               for layout in LAYOUTS}

    def mark(update_fn: UpdateFn) -> UpdateFn:
        own = reasons
        if global_reduction is not None:
            own = {**reasons, STACKED: f"{_name(update_fn)} {global_reduction}"}
        return declare(update_fn, layouts=own)

    return mark


def why_not(tx_or_update: Any, layout: str = FLAT) -> Optional[str]:
    """``None`` if the transformation (or update function) may run in ``layout``, else why not.

    Raises:
      ValueError: if ``layout`` is not one of :data:`LAYOUTS`.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"Unknown layout {layout!r}; expected one of {LAYOUTS}.")
    reasons = capabilities_of(tx_or_update).layouts
    if reasons is None:
        update_fn = getattr(tx_or_update, "update", tx_or_update)
        return f"{_name(update_fn)} is not declared elementwise or per-leaf"
    return reasons[layout]


def _name(update_fn: Callable[..., Any]) -> str:
    """The transformation an update function belongs to (``scale_by_adam`` for
    ``scale_by_adam.<locals>.update_fn``)."""
    qualname = getattr(update_fn, "__qualname__", None) or type(update_fn).__name__
    return qualname.split(".<locals>")[0]
