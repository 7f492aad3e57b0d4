"""Optimizer states as flat dictionaries keyed by name, for ``torch.distributed.checkpoint``.

Public as :mod:`optax_compat.distributed` (an extension: Optax checkpoints with Orbax). A state
is a tree of positional NamedTuples and tuples around subtrees keyed like the params. DCP saves
and reshards dictionaries of tensors (DTensors included) keyed by name, and does not look inside
tuples: it would pickle them whole, with the saving ranks' shards. :func:`state_to_flat_dict`
names each leaf by its path through the state, NamedTuple field names, dict keys (so parameter
names) and sequence indices joined with dots: ``"1.0.mu.layer.weight"`` is the first moment of
``layer.weight`` in ``chain(clip_by_global_norm(1.0), adam(1e-3))``. FSDP2 ``DTensor`` leaves
are resharded by DCP on load; plain tensors such as step counts, the same on every rank, are
saved once.
"""

from __future__ import annotations

from typing import Any

import optree

from optax_compat._runtime import tree_math

__all__ = ["state_from_flat_dict", "state_to_flat_dict"]


def _key(accessor: optree.PyTreeAccessor) -> str:
    parts = []
    for entry in accessor:
        is_field = isinstance(entry, optree.NamedTupleEntry)
        parts.append(entry.field if is_field else str(entry.entry))
    return ".".join(parts)


def _named_leaves(state: Any) -> tuple[list[str], list[Any], optree.PyTreeSpec]:
    accessors, leaves, spec = optree.tree_flatten_with_accessor(
        state, none_is_leaf=tree_math.NONE_IS_LEAF, namespace=tree_math.NAMESPACE)
    keys = [_key(accessor) for accessor in accessors]
    if len(set(keys)) != len(keys):
        duplicate = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"Two leaves of the state are both named {duplicate!r}; rename the "
                         "params so that joining keys with dots keeps them apart.")
    return keys, leaves, spec


def state_to_flat_dict(state: Any) -> dict[str, Any]:
    """The leaves of an optimizer state in a flat dict keyed by their paths.

    Args:
      state: any optimizer state (``tx.init(params)`` or a later one).

    Returns:
      ``{path: leaf}``, holding the state's own tensors (no copies), so that
      ``torch.distributed.checkpoint.load`` into it fills the state in place.

    Raises:
      ValueError: if two leaves get the same name.
    """
    keys, leaves, _ = _named_leaves(state)
    return dict(zip(keys, leaves))


def state_from_flat_dict(template: Any, values: dict[str, Any]) -> Any:
    """Rebuilds a state with the structure of ``template`` from the dict of its leaves.

    Args:
      template: a state of the optimizer to restore, e.g. ``tx.init(params)``, whose structure
        (and, for DCP, whose tensor layouts) the result takes.
      values: ``{path: leaf}`` as :func:`state_to_flat_dict` makes it, e.g. after
        ``torch.distributed.checkpoint.load``.

    Returns:
      The state, leaf ``path`` taken from ``values[path]``.

    Raises:
      KeyError: naming the first path of ``template`` missing from ``values``.
    """
    keys, _, spec = _named_leaves(template)
    missing = [key for key in keys if key not in values]
    if missing:
        raise KeyError(f"The saved state has no entry {missing[0]!r} that the optimizer's "
                       "state has; was it saved from another optimizer?")
    return optree.tree_unflatten(spec, [values[key] for key in keys])
