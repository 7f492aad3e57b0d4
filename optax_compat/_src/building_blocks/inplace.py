"""The opt-in in-place path: which transformations support it, and how the request travels.

A transformation that can write its new state into the old buffers (and its updates into the
incoming ones) declares it by decorating its ``update`` with :func:`supports_inplace`; its
``update`` then takes a keyword-only ``inplace: bool = False``. Every other transformation
built as a :class:`~optax_compat.GradientTransformationExtraArgs` has the request removed
at its entry (see :func:`without_inplace_request`), so a wrapper that keeps an old inner state
(``apply_if_finite``, ``MultiSteps``, ...) can never pass it on by mistake. Combinators that
declare support (``chain``, ``named_chain``, ``partition``, ``masked``) forward it to each
inner transformation, and the inner ones that do not support it drop it themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

UpdateFn = TypeVar("UpdateFn", bound=Callable[..., Any])

_MARK = "supports_inplace"


def supports_inplace(update_fn: UpdateFn) -> UpdateFn:
    """Declares that ``update_fn`` honours ``inplace=True``; returns it, marked."""
    setattr(update_fn, _MARK, True)
    return update_fn


def declares_inplace(update_fn: Callable[..., Any]) -> bool:
    """Whether ``update_fn`` was declared with :func:`supports_inplace`."""
    return getattr(update_fn, _MARK, False)


def without_inplace_request(update_fn: UpdateFn) -> UpdateFn:
    """``update_fn`` behind an entry that drops any ``inplace`` request, unless it declares it.

    Already-declared and already-wrapped functions are returned unchanged.
    """
    if hasattr(update_fn, _MARK):
        return update_fn

    @functools.wraps(update_fn)
    def update(updates: Any, state: Any, params: Any = None, **extra_args: Any) -> Any:
        extra_args.pop("inplace", None)
        return update_fn(updates, state, params, **extra_args)

    setattr(update, _MARK, False)
    return update  # type: ignore[return-value]
