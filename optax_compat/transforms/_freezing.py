"""Freezing parameters (mirrors ``optax/transforms/_freezing.py``)."""

from __future__ import annotations

from optax_compat._runtime import tree_math
from optax_compat._src import base
from optax_compat.transforms._combining import partition
from optax_compat.transforms._masking import masked


def freeze(mask: bool | base.ArrayTree) -> base.GradientTransformation:
    """Zeroes the updates where ``mask`` is true, holding those parameters constant.

    Args:
      mask: a static boolean (freeze everything or nothing) or a tree of booleans with the
        structure of the params or a prefix of it (true freezes that leaf or subtree).

    Returns:
      ``masked(set_to_zero(), mask)``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.5])}
      >>> tx = optax.freeze({"w": False, "b": True})
      >>> state = tx.init(params)
      >>> updates, state = tx.update(params, state)
      >>> updates["w"], updates["b"]
      (tensor([ 1., -2.]), tensor([0.]))
    """
    return masked(base.set_to_zero(), mask)


def selective_transform(
    optimizer: base.GradientTransformation,
    *,
    freeze_mask: bool | base.ArrayTree,
) -> base.GradientTransformation:
    """Applies ``optimizer`` to the parameters that are not frozen; zeroes the others.

    Unlike ``chain(freeze(mask), optimizer)``, the optimizer keeps no state for frozen leaves.

    Args:
      optimizer: the transformation of the trainable leaves.
      freeze_mask: a static boolean or a tree of booleans (true freezes), as in :func:`freeze`.

    Returns:
      A :func:`partition` with the labels ``"train"`` and ``"freeze"``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.5])}
      >>> tx = optax.selective_transform(optax.sgd(0.1), freeze_mask={"w": False, "b": True})
      >>> state = tx.init(params)
      >>> updates, state = tx.update(params, state, params)
      >>> updates["w"], updates["b"]
      (tensor([-0.1000,  0.2000]), tensor([0.]))
    """

    def label_fn(params: base.PyTree) -> base.PyTree:
        del params
        return tree_math.tree_map(lambda frozen: "freeze" if frozen else "train", freeze_mask)

    return partition({"train": optimizer, "freeze": base.set_to_zero()}, param_labels=label_fn)
