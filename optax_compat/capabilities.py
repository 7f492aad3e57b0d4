"""Declaring what your own transformation does, so that the fast paths run it (not an Optax name).

Optax has no such module: under ``jax.jit`` XLA fuses whatever a transformation computes. Here
the fast paths need to be told what a transformation's ``update`` does before they may change
how it runs:

* :func:`optax_compat.fused_step` and ``TorchOptimizer(..., fused=True)`` pack the parameters
  into a few buffers and run ``update`` on those. A transformation that acts element by element
  (:func:`elementwise`) or only adds reductions over the whole tree (:func:`global_reduction`)
  runs on one flat buffer per dtype; one that acts leaf by leaf (:func:`per_leaf`) runs on stacks
  of same-shape leaves under ``torch.func.vmap``.
* ``update(..., inplace=True)`` (and ``chain``, ``partition``, ``masked`` passing it on) reaches
  only an ``update`` that says it honours it (:func:`supports_inplace`); elsewhere the request
  is dropped.

Undeclared transformations stay correct and take the slow path. Each declaration works as a
decorator of an ``update`` function, before it goes into a
:class:`~optax_compat.GradientTransformation`, or on a built transformation (``stateless``'s,
``stateless_with_tree_map``'s or your own), which it returns redeclared, leaving the one passed
in as it was::

    from optax_compat import capabilities

    @capabilities.elementwise
    def update(updates, state, params=None):
        ...

    tx = capabilities.elementwise(optax.stateless_with_tree_map(lambda g, p: g.sign()))

A declaration is trusted where it is read. :func:`optax_compat.testing.check_declarations`
(and ``fused_step(..., validate=True)``) test it on data: a wrong one is caught there.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from optax_compat._runtime import inplace as _inplace
from optax_compat._runtime.capabilities import Capabilities, capabilities_of, declare
from optax_compat._runtime.flat_safe import (
    FLAT,
    LAYOUTS,
    STACKED,
    elementwise_if,
    why_not,
)
from optax_compat._runtime.flat_safe import elementwise as _elementwise
from optax_compat._runtime.flat_safe import global_reduction as _global_reduction
from optax_compat._runtime.flat_safe import per_leaf as _per_leaf

__all__ = [
    "FLAT",
    "LAYOUTS",
    "STACKED",
    "Capabilities",
    "capabilities_of",
    "elementwise",
    "global_reduction",
    "like",
    "per_leaf",
    "supports_inplace",
    "why_not",
]

T = TypeVar("T")


def _declaring(mark: Callable[[Callable[..., Any]], Callable[..., Any]],
               what: str) -> Callable[[T], T]:
    """A declaration that ``mark``s an update function, or redeclares a transformation."""

    def apply(tx_or_update: T) -> T:
        if isinstance(tx_or_update, tuple) and hasattr(tx_or_update, "_replace") and hasattr(
                tx_or_update, "update"):
            return tx_or_update._replace(update=mark(_own_update(tx_or_update.update)))
        if not callable(tx_or_update):
            raise TypeError(f"capabilities.{what} declares an update function or a "
                            "GradientTransformation, not "
                            f"{type(tx_or_update).__name__}.")
        try:
            return mark(tx_or_update)  # type: ignore[return-value]
        except AttributeError:  # a bound method or a callable object takes no attribute
            return mark(_own_update(tx_or_update))  # type: ignore[return-value]

    return apply


def _own_update(update_fn: Callable[..., Any]) -> Callable[..., Any]:
    """A new function object that runs ``update_fn`` with its record, so that declaring it
    leaves ``update_fn`` (and the transformation it came from) as it was.

    The entries a transformation's constructor puts in front of its ``update`` (``None``
    gradients; :class:`~optax_compat.GradientTransformationExtraArgs`' dropping of in-place
    requests it was not told of) are left out: ``_replace`` builds them again, around the new
    declaration.
    """
    record = capabilities_of(update_fn)
    inner = update_fn
    if capabilities_of(inner).tolerates_none:
        inner = inner.__wrapped__
    if capabilities_of(inner).inplace is False and hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    if isinstance(inner, types.FunctionType):  # a copy: no extra call on each step
        copy = types.FunctionType(inner.__code__, inner.__globals__, inner.__name__,
                                  inner.__defaults__, inner.__closure__)
        copy.__kwdefaults__ = inner.__kwdefaults__
        copy = functools.update_wrapper(copy, inner)
    else:
        @functools.wraps(inner)
        def copy(*args: Any, **kwargs: Any) -> Any:
            return inner(*args, **kwargs)
    return declare(copy, layouts=record.layouts, whole_step=record.whole_step,
                   whole_step_reads_grads_in_place=record.whole_step_reads_grads_in_place,
                   inplace=True if record.inplace else None, tolerates_none=False)


def elementwise(tx_or_update: T) -> T:
    """Declares that ``update`` computes each element from the same element of the updates, the
    state and the params only (plus scalars shared by all: a step count, a schedule's value).

    Packed buffers of either layout then give the same numbers as the leaves.

    Args:
      tx_or_update: an ``update`` function (as a decorator) or a transformation.

    Returns:
      The update function, declared; or a transformation of the same type whose ``update`` is.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> from optax_compat import capabilities
      >>> sign = capabilities.elementwise(optax.stateless_with_tree_map(lambda g, p: g.sign()))
      >>> capabilities.why_not(sign) is None
      True
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> step = optax.fused_step(optax.chain(sign, optax.scale(-0.5)), params,
      ...                         backend="aot_eager")
      >>> step({"w": torch.tensor([3.0, -0.1])})
      >>> params["w"]
      tensor([ 0.5000, -1.5000])
    """
    return _declaring(_elementwise, "elementwise")(tx_or_update)


def global_reduction(what: str) -> Callable[[T], T]:
    """Declares an ``update`` that is elementwise but for reductions over the whole tree (a
    global norm, a dot product of all leaves).

    It may then run on flat buffers (the reductions sum in another order), not on stacks.

    Args:
      what: the reduction, finishing the sentence "<transformation> ..." (e.g. ``"divides by
        the global norm"``); it is the reason given where the stacked layout is refused.

    Returns:
      The declaration, for an update function or a transformation (see :func:`elementwise`).
    """
    return _declaring(_global_reduction(what), "global_reduction")


def per_leaf(what: str) -> Callable[[T], T]:
    """Declares an ``update`` that computes each leaf from that leaf, its state and its param
    only, but reads its shape or reduces over it (a per-matrix norm, a row mean).

    It may then run on stacks of same-shape leaves under ``torch.func.vmap``, not on flat
    buffers.

    Args:
      what: what it does, finishing the sentence "<transformation> ..." (e.g. ``"normalizes each
        leaf by its norm"``); it is the reason given where the flat layout is refused.

    Returns:
      The declaration, for an update function or a transformation (see :func:`elementwise`).
    """
    return _declaring(_per_leaf(what), "per_leaf")


def like(*inner: Any, global_reduction: Optional[str] = None) -> Callable[[T], T]:
    """Declares a wrapper or combinator valid in the layouts that all of ``inner`` are.

    Args:
      *inner: the transformations (or update functions) it runs.
      global_reduction: what the wrapper itself reduces over the whole tree, if anything; the
        stacked layout is then refused.

    Returns:
      The declaration, for an update function or a transformation (see :func:`elementwise`).
    """
    return _declaring(elementwise_if(*inner, global_reduction=global_reduction), "like")


def supports_inplace(tx_or_update: T) -> T:
    """Declares that ``update`` takes a keyword-only ``inplace: bool = False`` and honours it.

    With ``inplace=True`` it may write its new state into the buffers of the state it is given
    and its updates into the incoming updates' buffers, and nothing else (never the params).
    Returned updates must not share memory with the returned state: the next transformation of
    a chain scales them in place. :func:`optax_compat.testing.check_inplace` checks all of it.

    Args:
      tx_or_update: an ``update`` function (as a decorator) or a transformation.

    Returns:
      The declaration applied (see :func:`elementwise`).
    """
    return _declaring(_inplace.supports_inplace, "supports_inplace")(tx_or_update)

