"""What a transformation's ``update`` declares it can do: one record, one accessor.

Every fast path asks the same question of a transformation: may it write in place, may it run
on packed buffers (and in which layout), does it already handle ``None`` gradients, does it
carry a whole in-place step? The answers live in one :class:`Capabilities` record attached to
the update function (:func:`declare`) and are read through :func:`capabilities_of` only. The
decorators that say them (:func:`~optax_compat._runtime.inplace.supports_inplace`,
:func:`~optax_compat._runtime.flat_safe.elementwise` and its relatives,
:func:`~optax_compat._runtime.none_gradients.tolerates_none`) each set their own field, in any
order, and a wrapper made with ``functools.wraps`` carries the record it wraps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Optional, TypeVar

UpdateFn = TypeVar("UpdateFn", bound=Callable[..., Any])

_ATTRIBUTE = "__optax_compat_capabilities__"


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What an update function declares.

    Attributes:
      inplace: ``True`` if ``update`` honours ``inplace=True``; ``False`` if it sits behind an
        entry that drops the request; ``None`` if it says nothing (it must not be passed one).
      layouts: for each packed layout of :func:`optax_compat.fused_step` (``"flat"``,
        ``"stacked"``), ``None`` if ``update`` may run in it, else why not; ``None`` when
        undeclared (neither layout).
      tolerates_none: ``update`` gives ``None`` gradients their semantics itself (it is the
        wrapper of :func:`~optax_compat._runtime.none_gradients.tolerates_none`).
      whole_step: the whole in-place step ``step(params, grads, state) -> state`` on the same
        state as ``update`` (see :func:`optax_compat.inplace_step`), or ``None``.
      whole_step_reads_grads_in_place: ``whole_step`` is one pass of one of PyTorch's fused
        kernels over each tensor, reading the gradients where they are wherever
        :func:`~optax_compat._runtime.torch_kernels.takes` them: over few large tensors it
        costs less than copying new gradients into packed buffers
        (``TorchOptimizer(..., fused=True)`` then takes it).
    """

    inplace: Optional[bool] = None
    layouts: Optional[Mapping[str, Optional[str]]] = None
    tolerates_none: bool = False
    whole_step: Optional[Callable[..., Any]] = None
    whole_step_reads_grads_in_place: bool = False


_UNDECLARED = Capabilities()
_FIELDS = frozenset(field.name for field in dataclasses.fields(Capabilities))


def capabilities_of(tx_or_update: Any) -> Capabilities:
    """The record of a transformation (its ``update``) or of an update function."""
    update_fn = getattr(tx_or_update, "update", tx_or_update)
    return getattr(update_fn, _ATTRIBUTE, _UNDECLARED)


def declare(update_fn: UpdateFn, **fields: Any) -> UpdateFn:
    """Sets ``fields`` of ``update_fn``'s record (the others kept); returns ``update_fn``.

    Raises:
      TypeError: if a field is not one of :class:`Capabilities`'.
      AttributeError: if ``update_fn`` takes no attributes (a bound method).
    """
    unknown = fields.keys() - _FIELDS
    if unknown:
        raise TypeError(f"Capabilities has no field {sorted(unknown)} (its fields: "
                        f"{sorted(_FIELDS)}).")
    # A new record from the old one's fields (``dataclasses.replace`` costs ~4 us a call,
    # and every transformation a constructor builds declares some).
    setattr(update_fn, _ATTRIBUTE, Capabilities(**{**vars(capabilities_of(update_fn)),
                                                   **fields}))
    return update_fn
