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

import torch

from optax_compat._runtime import tree_math as tm
from optax_compat._runtime.capabilities import capabilities_of, declare

UpdateFn = TypeVar("UpdateFn", bound=Callable[..., Any])


def supports_inplace(update_fn: UpdateFn) -> UpdateFn:
    """Declares that ``update_fn`` honours ``inplace=True``; returns it, declared."""
    return declare(update_fn, inplace=True)


def declares_inplace(update_fn: Callable[..., Any]) -> bool:
    """Whether ``update_fn`` was declared with :func:`supports_inplace`."""
    return capabilities_of(update_fn).inplace is True


def without_inplace_request(update_fn: UpdateFn) -> UpdateFn:
    """``update_fn`` behind an entry that drops any ``inplace`` request, unless it declares it.

    Already-declared and already-wrapped functions are returned unchanged.
    """
    if capabilities_of(update_fn).inplace is not None:
        return update_fn

    @functools.wraps(update_fn)
    def update(updates: Any, state: Any, params: Any = None, **extra_args: Any) -> Any:
        inplace = extra_args.pop("inplace", False)
        new_updates, new_state = update_fn(updates, state, params, **extra_args)
        if inplace and not torch.compiler.is_compiling():
            new_updates = _apart_from_state(new_updates, new_state, updates)
        return new_updates, new_state

    return declare(update, inplace=False)


def _apart_from_state(new_updates: Any, new_state: Any, incoming: Any) -> Any:
    """``new_updates`` with no leaf that is also a leaf of ``new_state``.

    An in-place caller may write into the updates it gets back (the next transformation of a
    ``chain`` scales them in place), so an update that is itself a state buffer (SM3 returns its
    new momentum as the update) would corrupt the state. Such a leaf is copied into the incoming
    update's buffer, which the in-place request hands over (cloned if that one does not fit).
    """
    in_state = {id(x) for x in tm.leaves(new_state) if isinstance(x, torch.Tensor)}
    outputs, spec = tm.flatten(new_updates)
    if not any(id(u) in in_state for u in outputs):
        return new_updates
    buffers = tm.leaves(incoming)
    if len(buffers) != len(outputs):
        buffers = [None] * len(outputs)
    apart = []
    for update, buffer in zip(outputs, buffers, strict=True):
        if id(update) in in_state:
            fits = (isinstance(buffer, torch.Tensor) and id(buffer) not in in_state
                    and buffer.shape == update.shape and buffer.dtype == update.dtype)
            update = buffer.copy_(update) if fits else update.clone()
        apart.append(update)
    return tm.unflatten(spec, apart)
