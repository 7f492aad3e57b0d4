"""The per-group states of :class:`~torchopt_fn.MetaOptimizer` as ``weights_only`` checkpoints.

Each group's state is saved in the plain form of :func:`optax_compat.checkpoint.state_to_dict`
(an unstepped group as a tagged :class:`~torchopt_fn.base.UninitializedState`);
:func:`restore_groups` checks a saved tuple against the running optimizer before anything is
assigned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from optax_compat import checkpoint
from torchopt_fn.base import UninitializedState

__all__ = ["restore_groups"]


def _is_uninitialized(plain: Any) -> bool:
    return isinstance(plain, UninitializedState) or (
        isinstance(plain, dict)
        and plain.get(checkpoint.STATE_TYPE_KEY) == UninitializedState.__name__)


def restore_groups(saved: Any, group_template: Callable[[int], Any], group_count: int,
                   *, copy: bool) -> list[Any]:
    """Rebuilds the state of every group of an optimizer; nothing is assigned here.

    Args:
      saved: what the optimizer's ``state_dict()`` returned (a sequence, one entry per group).
      group_template: gives a state of group ``i`` (the current one, or a fresh ``init``).
      group_count: the optimizer's number of groups.
      copy: see :func:`optax_compat.checkpoint.state_from_dict`.

    Raises:
      ValueError: if ``saved`` does not fit the optimizer, naming the first differing path.
    """
    if not isinstance(saved, (tuple, list)) or len(saved) != group_count:
        found = f"{len(saved)} groups" if isinstance(saved, (tuple, list)) else type(saved).__name__
        raise ValueError(f"The optimizer has {group_count} parameter groups, the state has "
                         f"{found}.")
    restored = []
    for index, group in enumerate(saved):
        if _is_uninitialized(group):
            restored.append(UninitializedState())
            continue
        try:
            restored.append(checkpoint.state_from_dict(group_template(index), group, copy=copy))
        except ValueError as error:
            raise ValueError(f"group {index}: {error}") from None
    return restored
