"""Creating and reading the state buffers of transformations.

Every transformation builds its state from the params with :func:`zero_count`, :func:`zeros`
and :func:`full`, and reads it back in ``update`` with :func:`state_leaves` (which checks the
buffers against the structure of the incoming updates and names the first differing path).
:func:`store` and :func:`emit` implement the opt-in in-place path: the new values are written
into the old buffers (or the incoming updates) instead of being returned as fresh tensors.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from optax_compat._src.building_blocks import tree_math as tm

NO_PARAMS_MSG = (
    "You are using a transformation that requires the current value of parameters, but you "
    "are not passing `params` when calling `update`."
)


def device_of(tree: Any) -> Optional[torch.device]:
    """The device of the first tensor leaf of ``tree`` (``None`` for a tree without tensors)."""
    leaves = tm.leaves(tree)
    return leaves[0].device if leaves and isinstance(leaves[0], torch.Tensor) else None


def zero_count(params: Any) -> torch.Tensor:
    """An ``int32`` 0-d step counter on the device of ``params``, as Optax's counters."""
    return torch.zeros([], dtype=torch.int32, device=device_of(params))


def zeros(params: Any, dtype: Optional[torch.dtype] = None) -> Any:
    """A tree of zeros shaped like ``params`` (in ``dtype`` when given, else each leaf's)."""
    return tm.tree_map(lambda p: torch.zeros_like(p, dtype=dtype), params)


def full(params: Any, value: Any) -> Any:
    """A tree shaped and typed like ``params``, filled with ``value``."""
    return tm.tree_map(lambda p: torch.full_like(p, value), params)


def state_leaves(tree: Any, spec: Any, updates: Any, what: str) -> tm.Leaves:
    """The leaves of the state buffer ``tree``, structured as ``updates`` (whose spec is ``spec``).

    Raises:
      ValueError: naming ``what`` and the first path where ``tree`` and ``updates`` differ.
    """
    return tm.leaves_like(tree, spec, what, reference=updates)


def params_leaves(params: Any, spec: Any, updates: Any, name: str) -> tm.Leaves:
    """The leaves of ``params``, which the transformation ``name`` needs, structured as ``updates``.

    Raises:
      ValueError: if ``params`` is ``None`` (naming ``name``) or differs from ``updates``.
    """
    if params is None:
        raise ValueError(f"{NO_PARAMS_MSG} ({name} needs them.)")
    return tm.leaves_like(params, spec, "params", reference=updates)


def store(buffers: tm.Leaves, values: tm.Leaves, inplace: bool) -> tm.Leaves:
    """The new state buffers: ``values``, or ``buffers`` overwritten with them when in place."""
    if inplace and buffers is not values:
        return tm.copy_(buffers, values)
    return values


def emit(updates: tm.Leaves, results: tm.Leaves, inplace: bool) -> tm.Leaves:
    """The updates to return; in place they are written into the incoming ``updates`` tensors.

    Results of another dtype than the incoming updates (a promotion) are returned as they are.
    """
    if inplace and results is not updates and tm.same_dtypes(updates, results):
        return tm.copy_(updates, results)
    return results
