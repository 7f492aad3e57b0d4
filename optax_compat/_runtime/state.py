"""Creating and reading the state buffers of transformations.

Every transformation builds its state from the params with :func:`zero_count`, :func:`zeros`
and :func:`full`, and reads it back in ``update`` with :func:`state_leaves` (which checks the
buffers against the structure of the incoming updates and names the first differing path).
:func:`store` and :func:`emit` implement the opt-in in-place path: the new values are written
into the old buffers (or the incoming updates) instead of being returned as fresh tensors;
:func:`in_blocks` does so block by block, so that the temporaries of a formula span one block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import torch

from optax_compat._runtime import tree_math as tm

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
    if inplace and _other_tensors(buffers, values):
        return tm.copy_(buffers, values)
    return values


def emit(updates: tm.Leaves, results: tm.Leaves, inplace: bool) -> tm.Leaves:
    """The updates to return; in place they are written into the incoming ``updates`` tensors.

    Results of another dtype than the incoming updates (a promotion) are returned as they are.
    """
    if inplace and _other_tensors(results, updates) and tm.same_dtypes(updates, results):
        return tm.copy_(updates, results)
    return results


def _other_tensors(xs: tm.Leaves, ys: tm.Leaves) -> bool:
    """Whether the aligned lists hold other tensors (leaf by leaf: Dynamo in torch 2.11
    cannot trace ``is not`` between two lists)."""
    return any(x is not y for x, y in zip(xs, ys))


def in_blocks(formula: Callable[..., Sequence[tm.Leaves]], updates: tm.Leaves,
              *states: tm.Leaves, inplace: bool, split: bool = True) -> list[tm.Leaves]:
    """The new updates and state leaves of an elementwise ``formula``, in place block by block.

    ``formula(updates, *states, inplace=...)`` returns the new updates and one list of new
    leaves per state list. With ``inplace`` it may write into its arguments (returning them)
    once it has read what it needs; the other results are then copied into the buffers they
    replace, as :func:`emit` and :func:`store` do, the state first, so that a state may take
    the incoming updates themselves (a previous gradient). Without ``inplace`` it runs once on
    the whole lists and its results are returned.

    In place, with every leaf of one dtype and nothing differentiated, it runs on the blocks
    of :func:`tree_math.blocks` instead, and each block's results are written before the next
    block is read: a temporary ``formula`` allocates spans one block of at most
    :data:`tree_math.BLOCK_ELEMENTS` elements, not the parameters. Each element meets the same
    kernels, and a scalar ``formula`` derives from its leaves' dtypes (a bias correction in
    the widest of them) is the same in every block, so the numbers are those of the whole lists.
    A ``formula`` that reduces over a leaf's axes passes ``split=False``: its blocks are whole
    leaves, and a leaf larger than a block is a block of its own.

    Returns:
      The updates, then the new leaves of each state list.
    """
    buffers = (updates, *states)
    dtypes = {dtype for leaves in buffers for dtype in tm.attributes("dtype", leaves)}
    if inplace and len(dtypes) == 1 and not tm.is_recording(*buffers):
        for block in tm.blocks(*buffers, split=split):
            _store_all(block, formula(*block, inplace=True))
        return list(buffers)
    results = formula(*buffers, inplace=inplace)
    new_states = [store(leaves, new_leaves, inplace)
                  for leaves, new_leaves in zip(states, results[1:], strict=True)]
    return [emit(updates, results[0], inplace), *new_states]


def _store_all(buffers: Sequence[tm.Leaves], values: Sequence[tm.Leaves]) -> None:
    """Writes each list of ``values`` into its ``buffers``, the updates last; ``values`` dies
    with the call."""
    for leaves, new_leaves in zip(buffers[1:], values[1:], strict=True):
        store(leaves, new_leaves, inplace=True)
    store(buffers[0], values[0], inplace=True)
