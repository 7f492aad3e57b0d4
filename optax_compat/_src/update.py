"""Applying updates to parameters (mirrors ``optax/_src/update.py``)."""

from __future__ import annotations

import torch

from optax_compat._runtime import none_gradients, tree_math
from optax_compat._runtime.numbers import as_tensor
from optax_compat._src import base


def apply_updates(params: base.Params, updates: base.Updates) -> base.Params:
    """Returns ``params + updates``, leaf by leaf, keeping each parameter's dtype.

    A ``None`` update in place of a tensor (a ``None`` gradient, see
    :mod:`optax_compat._runtime.none_gradients`) leaves that parameter unchanged.

    Args:
      params: a tree of parameters.
      updates: a tree of updates with the structure and shapes of ``params``.

    Returns:
      New parameters; ``params`` is not modified.

    Raises:
      ValueError: if the trees differ in structure (naming the first differing path).

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, 2.0])}
      >>> updates = {"w": torch.tensor([0.5, -0.5])}
      >>> optax.apply_updates(params, updates)["w"]
      tensor([1.5000, 1.5000])
    """
    param_leaves, spec, update_leaves, present = none_gradients.present_pairs(params, updates)
    if present is None:
        present = range(len(param_leaves))
    sums = tree_math.add([param_leaves[i] for i in present], [update_leaves[i] for i in present])
    new_leaves = list(param_leaves)
    for i, new in zip(present, sums):
        p = param_leaves[i]
        new_leaves[i] = new if new.dtype == p.dtype else new.to(p.dtype)
    return tree_math.unflatten(spec, new_leaves)


def incremental_update(new_tensors: base.Params, old_tensors: base.Params,
                       step_size: float | torch.Tensor) -> base.Params:
    """Polyak averaging: ``step_size * new + (1 - step_size) * old``.

    References:
      Polyak & Juditsky, 1992, https://epubs.siam.org/doi/10.1137/0330046

    Args:
      new_tensors: the latest values.
      old_tensors: the running average.
      step_size: the weight of the latest values.

    Returns:
      The new running average.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> new = {"w": torch.tensor([1.0, 2.0])}
      >>> old = {"w": torch.tensor([0.0, 0.0])}
      >>> optax.incremental_update(new, old, step_size=0.1)["w"]
      tensor([0.1000, 0.2000])
    """
    new_leaves, spec = tree_math.flatten(new_tensors)
    old_leaves = tree_math.leaves_like(old_tensors, spec, "old_tensors", reference=new_tensors)
    averaged = tree_math.add(tree_math.mul(new_leaves, step_size),
                             tree_math.mul(old_leaves, 1.0 - step_size))
    return tree_math.unflatten(spec, averaged)


def periodic_update(new_tensors: base.Params, old_tensors: base.Params,
                    steps: int | torch.Tensor, update_period: int | torch.Tensor) -> base.Params:
    """Returns ``new_tensors`` every ``update_period`` steps, ``old_tensors`` otherwise.

    References:
      Grill et al., 2020, https://arxiv.org/abs/2006.07733;
      Mnih et al., 2015, https://arxiv.org/abs/1312.5602

    Args:
      new_tensors: the latest values (the online network).
      old_tensors: the slow copy (the target network).
      steps: number of updates so far.
      update_period: how many steps between refreshes of the slow copy.

    Returns:
      The slow copy, refreshed when ``steps % update_period == 0``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> new = {"w": torch.tensor([1.0, 2.0])}
      >>> old = {"w": torch.tensor([0.0, 0.0])}
      >>> optax.periodic_update(new, old, steps=3, update_period=2)["w"]
      tensor([0., 0.])
      >>> optax.periodic_update(new, old, steps=4, update_period=2)["w"]
      tensor([1., 2.])
    """
    refresh = as_tensor(steps) % update_period == 0
    new_leaves, spec = tree_math.flatten(new_tensors)
    old_leaves = tree_math.leaves_like(old_tensors, spec, "old_tensors", reference=new_tensors)
    return tree_math.unflatten(spec, tree_math.where(refresh, new_leaves, old_leaves))
