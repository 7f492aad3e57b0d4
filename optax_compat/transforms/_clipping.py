"""Gradient clipping (mirrors ``optax/transforms/_clipping.py``).

Complex leaves are supported: norms use ``|x| ** 2``.
"""

from __future__ import annotations

from typing import Any

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics

Scalar = float | torch.Tensor
Axis = int | tuple[int, ...] | None


def _in_dtype_of(scalar: Scalar, x: torch.Tensor) -> Scalar:
    """``scalar`` in the dtype of ``x`` when it is a tensor, so that it never promotes ``x``."""
    return scalar.to(x.real.dtype) if isinstance(scalar, torch.Tensor) else scalar


def clip(max_delta: Scalar) -> base.GradientTransformationExtraArgs:
    """Clips updates element-wise to ``[-max_delta, max_delta]``.

    Args:
      max_delta: the largest absolute value of an element of the updates.

    Returns:
      A stateless :class:`GradientTransformationExtraArgs`. Its ``update`` also takes a
      keyword-only ``inplace=False``: when true the incoming ``updates`` tensors are clipped in
      place (same numbers as the pure path).

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.clip(max_delta=1.0)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([3.0, -4.0])}, state, params)
      >>> updates["w"]
      tensor([ 1., -1.])
    """

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates: base.Updates, state: base.EmptyState,
                  params: base.Params | None = None, *, inplace: bool = False,
                  **extra_args: Any):
        del params, extra_args
        leaves, spec = tm.flatten(updates)
        if inplace:
            tm.clamp_(leaves, -max_delta, max_delta)
            return updates, state
        return tm.unflatten(spec, tm.minimum(tm.maximum(leaves, -max_delta), max_delta)), state

    return base.GradientTransformationExtraArgs(base.init_empty_state, update_fn)


def clip_by_block_rms(threshold: Scalar) -> base.GradientTransformationExtraArgs:
    """Clips each leaf (a weight vector or matrix, a "block") to a root mean square of at most
    ``threshold``.

    Args:
      threshold: the largest root mean square of each leaf of the updates.

    Returns:
      A stateless :class:`GradientTransformationExtraArgs`; its ``update`` accepts
      ``inplace``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.clip_by_block_rms(threshold=1.0)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([3.0, -4.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.8485, -1.1314])
    """

    def clip_denominators(block_rms: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(block_rms / _in_dtype_of(threshold, block_rms), 1.0)

    @bb.supports_inplace
    @bb.per_leaf("clips each leaf by its own root mean square")
    def update_fn(updates: base.Updates, state: base.EmptyState,
                  params: base.Params | None = None, *, inplace: bool = False,
                  **extra_args: Any):
        del params, extra_args
        leaves, spec = tm.flatten(updates)
        # All blocks at once: one norm kernel, one op per step of the factor, one division.
        denominators = tm.map_stacked(clip_denominators, tm.root_mean_squares(leaves))
        clipped = tm.div_(leaves, denominators) if inplace else tm.div(leaves, denominators)
        return tm.unflatten(spec, clipped), state

    return base.GradientTransformationExtraArgs(base.init_empty_state, update_fn)


def clip_by_global_norm(max_norm: Scalar) -> base.GradientTransformationExtraArgs:
    """Rescales the updates so that their global norm is at most ``max_norm``.

    The rescaling factor is chosen on the device with ``torch.where`` (no host sync).

    Args:
      max_norm: the largest global L2 norm of the updates.

    Returns:
      A stateless :class:`GradientTransformationExtraArgs`. Its ``update`` also takes a
      keyword-only ``inplace=False``: when true the incoming ``updates`` tensors are rescaled
      in place (same numbers as the pure path).

    References:
      Pascanu et al., `On the difficulty of training Recurrent Neural Networks
      <https://arxiv.org/abs/1211.5063>`_, 2012

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.clip_by_global_norm(max_norm=1.0)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([3.0, -4.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.6000, -0.8000])
    """

    @bb.supports_inplace
    @bb.global_reduction("divides by the global norm")
    def update_fn(updates: base.Updates, state: base.EmptyState,
                  params: base.Params | None = None, *, inplace: bool = False,
                  **extra_args: Any):
        del params, extra_args
        leaves, spec = tm.flatten(updates)
        if not leaves:
            return updates, state
        global_norm = torch.sqrt(tm.sum_of_squares(leaves))
        factor = torch.where(global_norm < max_norm, torch.ones_like(global_norm),
                             max_norm / global_norm)
        if inplace:
            tm.mul_(leaves, factor)
            return updates, state
        return tm.unflatten(spec, tm.mul(leaves, factor)), state

    return base.GradientTransformationExtraArgs(base.init_empty_state, update_fn)


def _check_batch_dim(grads: list[torch.Tensor], name: str) -> None:
    if not grads or any(g.ndim < 1 or g.shape[0] != grads[0].shape[0] for g in grads):
        raise ValueError(f"Unlike other transforms, `{name}` expects every leaf of `grads` to "
                         "have the same batch dimension on axis 0; got shapes "
                         f"{[tuple(g.shape) for g in grads]}.")


def _as_float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() or x.is_complex() else x.to(torch.get_default_dtype())


def _clip_examples(grads: list[torch.Tensor],
                   l2_norm_clip: Scalar) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Clips each example's gradient (row 0 of every leaf) to ``l2_norm_clip`` and sums them."""
    grads = [_as_float(g) for g in grads]
    squared_norms = [numerics.abs_sq(g.reshape(g.shape[0], -1)).sum(dim=1) for g in grads]
    norms = torch.sqrt(torch.stack(torch.broadcast_tensors(*squared_norms)).sum(dim=0))
    multipliers = torch.nan_to_num(torch.clamp_max(l2_norm_clip / norms, 1.0), nan=1.0)
    num_clipped = torch.sum(multipliers < 1.0, dtype=torch.int32)
    clipped_sums = [torch.tensordot(multipliers.to(g.dtype), g, dims=1) for g in grads]
    return clipped_sums, num_clipped


def per_example_global_norm_clip(
    grads: base.ArrayTree, l2_norm_clip: Scalar,
) -> tuple[base.ArrayTree, torch.Tensor]:
    """Clips per-example gradients by their global norm and sums them (DP-SGD's step).

    Args:
      grads: a tree whose leaves all have the batch of examples on axis 0.
      l2_norm_clip: the largest L2 norm of one example's gradient.

    Returns:
      The sum over examples of the clipped gradients (a tree like ``grads`` without the batch
      axis) and the number of examples that were clipped (a 0-d int32 tensor).

    Raises:
      ValueError: if the leaves do not share a batch axis 0.

    References:
      Abadi et al., `Deep Learning with Differential Privacy
      <https://arxiv.org/abs/1607.00133>`_, 2016

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> per_example_grads = {"w": torch.tensor([[3.0, 4.0], [0.3, 0.4]])}
      >>> summed, num_clipped = optax.per_example_global_norm_clip(per_example_grads, 1.0)
      >>> summed["w"], num_clipped
      (tensor([0.9000, 1.2000]), tensor(1, dtype=torch.int32))
    """
    leaves, spec = tm.flatten(grads)
    _check_batch_dim(leaves, "per_example_global_norm_clip")
    clipped_sums, num_clipped = _clip_examples(leaves, l2_norm_clip)
    return tm.unflatten(spec, clipped_sums), num_clipped


def per_example_layer_norm_clip(
    grads: base.ArrayTree, global_l2_norm_clip: Scalar, uniform: bool = True,
) -> tuple[base.ArrayTree, base.ArrayTree]:
    """Clips per-example gradients leaf by leaf ("layer" by layer) and sums them.

    With ``K`` leaves and ``C = global_l2_norm_clip``, leaf ``i`` is clipped to
    ``C / sqrt(K)`` when ``uniform``, else to ``C * sqrt(D_i / D)`` where ``D_i`` is the
    number of parameters of the leaf and ``D`` their total.

    Args:
      grads: a tree whose leaves all have the batch of examples on axis 0.
      global_l2_norm_clip: the overall L2 clipping norm.
      uniform: split the clipping norm evenly over the leaves rather than by their size.

    Returns:
      A pair of trees like ``grads``: the sums of the clipped per-example gradients, and the
      number of examples clipped in each leaf.

    Raises:
      ValueError: if the leaves do not share a batch axis 0.

    References:
      McMahan et al., `Learning Differentially Private Recurrent Language Models
      <https://arxiv.org/abs/1710.06963>`_, 2017

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> per_example_grads = {"w": torch.tensor([[3.0, 4.0], [0.3, 0.4]])}
      >>> summed, num_clipped = optax.per_example_layer_norm_clip(per_example_grads, 1.0)
      >>> summed["w"], num_clipped["w"]
      (tensor([0.9000, 1.2000]), tensor(1, dtype=torch.int32))
    """
    leaves, spec = tm.flatten(grads)
    _check_batch_dim(leaves, "per_example_layer_norm_clip")
    if uniform:
        fractions = [1.0 / len(leaves)] * len(leaves)
    else:
        total_size = sum(g[0].numel() for g in leaves)
        fractions = [g[0].numel() / total_size for g in leaves]
    results = [_clip_examples([g], global_l2_norm_clip * fraction ** 0.5)
               for g, fraction in zip(leaves, fractions, strict=True)]
    return (tm.unflatten(spec, [sums[0] for sums, _ in results]),
            tm.unflatten(spec, [count for _, count in results]))


def unitwise_norm(x: torch.Tensor, axis: Axis = None) -> torch.Tensor:
    """The L2 norm of each "unit" of ``x``, broadcast back to the shape of ``x``.

    Without ``axis``, the reduction follows common layer layouts: the whole tensor for
    scalars and vectors, axis 0 for rank 2 and 3 (linear, multi-head linear), axes (0, 1, 2)
    for rank 4 (HWIO convolutions) and (0, 1, 2, 3) for rank 5 (3-D convolutions).

    Args:
      x: the tensor.
      axis: the axes to reduce over, overriding the layout rule.

    Returns:
      A tensor shaped like ``x``.

    Raises:
      ValueError: for a rank above 5 without ``axis``.
    """
    if axis is not None:
        reduce_dims = axis
    elif x.squeeze().ndim <= 1:
        reduce_dims = tuple(range(x.ndim))
    elif x.ndim in (2, 3):
        reduce_dims = 0
    elif x.ndim in (4, 5):
        reduce_dims = tuple(range(x.ndim - 1))
    else:
        raise ValueError(f"Expected a parameter of rank 1 to 5, got shape {tuple(x.shape)}. "
                         "Use the axis argument to choose the reduction axes for other shapes.")
    squared_norm = torch.sum(numerics.abs_sq(x), dim=reduce_dims, keepdim=True)
    return torch.broadcast_to(torch.sqrt(squared_norm), x.shape)


def unitwise_clip(g_norm: torch.Tensor, max_norm: torch.Tensor, grad: torch.Tensor,
                  div_eps: Scalar = 1e-6) -> torch.Tensor:
    """Rescales ``grad`` to ``max_norm`` wherever its unit norm ``g_norm`` exceeds it.

    Args:
      g_norm: the unit-wise norms of ``grad`` (see :func:`unitwise_norm`).
      max_norm: the largest allowed unit-wise norms, shaped like ``g_norm``.
      grad: the gradient.
      div_eps: floor of ``g_norm`` in the division, against division by zero.

    Returns:
      The clipped gradient.

    Raises:
      ValueError: if the three tensors do not have the same shape.
    """
    if not g_norm.shape == max_norm.shape == grad.shape:
        raise ValueError("unitwise_clip expects g_norm, max_norm and grad of one shape, got "
                         f"{tuple(g_norm.shape)}, {tuple(max_norm.shape)}, "
                         f"{tuple(grad.shape)}.")
    clipped_grad = grad * (max_norm / torch.clamp_min(g_norm, _in_dtype_of(div_eps, g_norm)))
    return torch.where(g_norm < max_norm, grad, clipped_grad)


def adaptive_grad_clip(clipping: Scalar, eps: Scalar = 1e-3,
                       axis: Axis = None) -> base.GradientTransformation:
    """Clips each unit of the updates to at most ``clipping`` times the unit norm of the params.

    Args:
      clipping: the largest allowed ratio of update norm to parameter norm.
      eps: floor of the parameter norm, so that zero-initialised params can still move.
      axis: the axes of a unit (see :func:`~optax_compat.transforms.unitwise_norm`); layout
        rules when ``None``.

    Returns:
      A stateless :class:`GradientTransformation` that needs ``params``.

    References:
      Brock et al., `High-Performance Large-Scale Image Recognition Without Normalization
      <https://arxiv.org/abs/2102.06171>`_, 2021

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.adaptive_grad_clip(clipping=0.1)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([3.0, -4.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.1342, -0.1789])
    """

    def clip_unit(update: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
        max_norm = (_in_dtype_of(clipping, param)
                    * torch.clamp_min(unitwise_norm(param, axis), _in_dtype_of(eps, param)))
        return unitwise_clip(unitwise_norm(update, axis), max_norm, update)

    @bb.per_leaf("clips each unit of a leaf by the norm of its parameter")
    def update_fn(updates: base.Updates, state: base.EmptyState,
                  params: base.Params | None = None):
        update_leaves, spec = tm.flatten(updates)
        param_leaves = bb.params_leaves(params, spec, updates, "adaptive_grad_clip")
        clipped = [clip_unit(u, p) for u, p in zip(update_leaves, param_leaves, strict=True)]
        return tm.unflatten(spec, clipped), state

    return base.GradientTransformation(base.init_empty_state, update_fn)

