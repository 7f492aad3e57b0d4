"""Transforming only part of the parameters (mirrors ``optax/transforms/_masking.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from optax_compat._src import base
from optax_compat.tree_utils import _state_utils

MaskOrFn = base.PyTree | Callable[[base.Params], base.PyTree]


class MaskedState(NamedTuple):
    """The state of the inner transformation of :func:`masked`."""

    inner_state: Any


class MaskedNode(NamedTuple):
    """Stands for a masked-out subtree.

    A NamedTuple without fields is a pytree node without children, so tree maps pass over it:
    the inner transformation of :func:`masked` never sees the masked-out leaves.
    """


def _is_callable_mask(mask: MaskOrFn) -> bool:
    """Whether ``mask`` is a function of the params rather than a tree of booleans."""
    callable_leaves = tree_math.leaves(tree_math.tree_map(callable, mask))
    return len(callable_leaves) > 0 and all(callable_leaves)


def _mask_out(tree: base.PyTree, mask_tree: base.PyTree) -> base.PyTree:
    """``tree`` with every subtree whose mask is false replaced by a :class:`MaskedNode`."""
    return tree_math.map_over_prefix(lambda keep, subtree: subtree if keep else MaskedNode(),
                                     mask_tree, tree, what="mask")


def masked(
    inner: base.GradientTransformation,
    mask: MaskOrFn,
    *,
    mask_compatible_extra_args: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Applies ``inner`` only where ``mask`` is true and passes the other updates through.

    A typical use is to skip weight decay for biases and normalisation scales, e.g. with
    ``mask=lambda p: tree_map(lambda x: x.ndim != 1, p)``. The inner state only holds the
    masked-in leaves.

    Args:
      inner: the transformation to apply to the masked-in leaves.
      mask: a tree of booleans with the structure of the params or a prefix of it (a leaf
        covers a whole subtree), or a function returning one given the params/updates.
      mask_compatible_extra_args: also mask those extra arguments of ``update`` that have the
        structure of the updates (e.g. per-parameter tags).

    Returns:
      A :class:`GradientTransformationExtraArgs`; extra arguments reach ``inner``.

    Raises:
      ValueError: (at ``init``/``update``) if the mask is not a prefix of the params,
        naming the first differing path.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.5])}
      >>> tx = optax.masked(optax.scale(-0.1), mask={"w": True, "b": False})
      >>> state = tx.init(params)
      >>> updates, state = tx.update(params, state)
      >>> updates["w"], updates["b"]  # masked-out leaves pass through unchanged
      (tensor([-0.1000,  0.2000]), tensor([0.5000]))
    """
    inner = base.with_extra_args_support(inner)
    # Decided once here rather than in every update: a traced step (torch.compile) then never
    # flattens the mask tree that this check builds.
    mask_is_fn = _is_callable_mask(mask)

    def mask_tree_for(tree: base.PyTree) -> base.PyTree:
        """The boolean mask tree (a prefix of ``tree``), calling ``mask`` on ``tree`` if needed."""
        return mask(tree) if mask_is_fn else mask

    def mask_extra_args(extra_args: dict[str, Any], updates: base.Updates,
                        mask_tree: base.PyTree) -> dict[str, Any]:
        if not mask_compatible_extra_args:
            return extra_args
        updates_spec = tree_math.treespec(updates)
        return {name: _mask_out(value, mask_tree)
                if tree_math.treespec(value) == updates_spec else value
                for name, value in extra_args.items()}

    def init_fn(params: base.Params) -> MaskedState:
        # tree_map_params calls init with a placeholder standing for the whole params tree, to
        # find where the state holds params-shaped trees; pass it through unmasked.
        if isinstance(params, _state_utils.ParamsPlaceholder):
            return MaskedState(inner_state=inner.init(params))
        mask_tree = mask_tree_for(params)
        return MaskedState(inner_state=inner.init(_mask_out(params, mask_tree)))

    def update_fn(updates: base.Updates, state: MaskedState,
                  params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, MaskedState]:
        mask_tree = mask_tree_for(updates)
        masked_updates = _mask_out(updates, mask_tree)
        masked_params = None if params is None else _mask_out(params, mask_tree)
        new_masked_updates, new_inner_state = inner.update(
            masked_updates, state.inner_state, masked_params,
            **mask_extra_args(extra_args, updates, mask_tree))
        new_updates = tree_math.tree_map(
            lambda keep, new, old: new if keep else old, mask_tree, new_masked_updates, updates)
        return new_updates, MaskedState(inner_state=new_inner_state)

    # A constant mask treats every leaf alike, so the inner transformation's layouts hold; a
    # mask per leaf tells apart leaves that a packed buffer merges.
    if isinstance(mask, bool):
        update_fn = bb.elementwise_if(inner)(update_fn)
    return base.GradientTransformationExtraArgs(init_fn, bb.supports_inplace(update_fn))
