"""ADOPT: Adam with the second moment of the *previous* step and clipped normalised updates.

Mirrors ``optax/contrib/_adopt.py``. The arithmetic runs over lists of leaves through
:mod:`optax_compat._runtime.tree_math`; the first-step special cases are ``torch.where``
selections, so ``update`` never synchronises with the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics, transform
from optax_compat.transforms import _combining

Scalar = Union[float, torch.Tensor]


def _default_clip_value(count: torch.Tensor) -> torch.Tensor:
    return count**0.25


def _after_first_step(count: torch.Tensor, value: Scalar, first: float,
                      dtype: torch.dtype) -> torch.Tensor:
    """``value`` once ``count > 0``, ``first`` at the first step, as a 0-d tensor of ``dtype``."""
    return torch.where(count > 0, torch.as_tensor(value, dtype=dtype, device=count.device),
                       torch.as_tensor(first, dtype=dtype, device=count.device))


def _per_leaf(value: Any, count: int) -> list:
    """A per-leaf list from what :func:`~.building_blocks.tree_math.scalar_like` returns."""
    return value if isinstance(value, list) else [value] * count


def scale_by_adopt(
    b1: Scalar = 0.9,
    b2: Scalar = 0.9999,
    eps: Scalar = 1e-6,
    mu_dtype: Optional[torch.dtype] = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[torch.Tensor], torch.Tensor] = _default_clip_value,
) -> base.GradientTransformationExtraArgs:
    """Rescales updates by ADOPT.

    The gradient is normalised by the root of the second moment *before* this gradient
    (optionally clipped to ``[-c, c]`` with ``c = clip_value_fn(count)``), and the first moment
    averages these normalised gradients. At the first step the second moment is initialised
    with the squared gradient and the update is zero.

    Args:
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: lower bound of the root of the second moment.
      mu_dtype: dtype of the first moment (``None``: that of the params).
      nesterov: use Nesterov's look-ahead first moment.
      use_clipping: clip the normalised gradients.
      clip_value_fn: maps the step count to the clipping bound. It receives the count as a
        0-d tensor of the updates' (widest) floating dtype, so that the bound has the
        precision of the updates (Optax passes JAX's default float implicitly).

    Returns:
      A transformation whose state is a :class:`~optax_compat.ScaleByAdamState`; its
      ``update`` accepts ``inplace``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.scale_by_adopt()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]  # ADOPT only initializes its second moment at the first step
      tensor([0., 0.])
    """
    mu_dtype = bb.canonical_dtype(mu_dtype)

    def init_fn(params: base.Params) -> transform.ScaleByAdamState:
        return transform.ScaleByAdamState(count=bb.zero_count(params),
                                          mu=bb.zeros(params, mu_dtype),
                                          nu=bb.zeros(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates: base.Updates, state: transform.ScaleByAdamState,
                  params: Optional[base.Params] = None, *, inplace: bool = False,
                  **extra_args: Any):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        dtype = tm.widest_real_dtype(gs)
        b1_now = _after_first_step(state.count, b1, 1.0, dtype)
        b2_now = _after_first_step(state.count, b2, 0.0, dtype)
        clip_value = clip_value_fn(state.count.to(dtype)) if use_clipping else None

        def formula(gs: tm.Leaves, mus: tm.Leaves, nus: tm.Leaves,
                    inplace: bool) -> tuple[tm.Leaves, tm.Leaves, tm.Leaves]:
            del inplace
            new_nus = bb.moving_average(nus, tm.abs_sq(gs), b2_now)
            normalised = tm.div(gs, tm.maximum(tm.sqrt(nus), eps))
            if use_clipping:
                bounds = _per_leaf(tm.scalar_like(clip_value, normalised), len(normalised))
                normalised = tm.minimum(tm.maximum(normalised, [-b for b in bounds]), bounds)
            new_mus = bb.moving_average(mus, normalised, b1_now)
            scaled = bb.moving_average(new_mus, normalised, b1_now) if nesterov else new_mus
            return scaled, tm.cast(new_mus, mu_dtype), new_nus

        scaled, new_mus, new_nus = bb.in_blocks(formula, gs, mus, nus, inplace=inplace)
        return tm.unflatten(spec, scaled), transform.ScaleByAdamState(
            count=numerics.safe_increment(state.count), mu=tm.unflatten(spec, new_mus),
            nu=tm.unflatten(spec, new_nus))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def adopt(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.9999,
    eps: Scalar = 1e-6,
    mu_dtype: Optional[Any] = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[torch.Tensor], torch.Tensor] = _default_clip_value,
) -> base.GradientTransformationExtraArgs:
    r"""ADOPT: a modified Adam that converges with any :math:`\beta_2`.

    The second moment used to normalise the gradient excludes the current gradient, and the
    momentum is taken over normalised (by default clipped) gradients; this removes Adam's
    dependence on a well-chosen :math:`\beta_2`.

    Args:
      learning_rate: a fixed step size or a schedule of the step count.
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: lower bound of the root of the second moment.
      mu_dtype: dtype of the first moment (``None``: that of the params).
      nesterov: use Nesterov's look-ahead first moment.
      use_clipping: clip the normalised gradients (recommended when training from scratch).
      clip_value_fn: maps the step count to the clipping bound (default ``count ** 0.25``).

    Returns:
      The optimizer as a gradient transformation.

    References:
      Taniguchi et al, `ADOPT: Modified Adam Can Converge with Any beta2 with the Optimal Rate
      <https://arxiv.org/abs/2411.02853>`_, NeurIPS 2024.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.adopt(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.9711, -1.9711])
    """
    return _combining.chain(
        scale_by_adopt(b1=b1, b2=b2, eps=eps, mu_dtype=mu_dtype, nesterov=nesterov,
                       use_clipping=use_clipping, clip_value_fn=clip_value_fn),
        transform.scale_by_learning_rate(learning_rate),
    )
