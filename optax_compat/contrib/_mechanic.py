"""Mechanic: a learning-rate tuner wrapped around any optimizer (``optax/contrib/_mechanic.py``).

Mechanic accumulates the updates of a base optimizer and learns, online, the scale to apply to
them. It keeps a copy of the initial params and a handful of ``num_betas``-sized vectors.

References:
  Cutkosky et al., `Mechanic: A Learning Rate Tuner <https://arxiv.org/abs/2306.00144>`_,
  2023.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import control_flow
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics, transform
from optax_compat.tree_utils import _casting

Scalar = transform.Scalar


class MechanicState(NamedTuple):
    """State of :func:`mechanize`.

    Attributes:
      base_optimizer_state: the state of the wrapped optimizer.
      count: the number of updates so far (0-d ``int32``).
      r: per-beta accumulated rewards.
      m: per-beta running maxima of ``|h|``.
      v: per-beta discounted sums of ``h ** 2``.
      s: per-beta scale factors; their sum scales the accumulated updates.
      x0: the reference params the accumulated updates start from.
    """

    base_optimizer_state: base.OptState
    count: torch.Tensor
    r: torch.Tensor
    m: torch.Tensor
    v: torch.Tensor
    s: torch.Tensor
    x0: base.Updates


def mechanize(
    base_optimizer: base.GradientTransformation,
    weight_decay: Scalar = 1e-2,
    eps: Scalar = 1e-8,
    s_init: Scalar = 1e-6,
    num_betas: int = 6,
) -> base.GradientTransformationExtraArgs:
    """Wraps ``base_optimizer`` with Mechanic, which learns the scale of its updates.

    A learning-rate schedule is still useful: give the base optimizer the schedule with a peak
    of 1 and Mechanic learns the factor in front of it.

    Args:
      base_optimizer: the optimizer whose updates are accumulated and rescaled.
      weight_decay: Mechanic's own weight decay on the raw gradients (independent of any
        weight decay of the base optimizer); it also reduces the variance between runs.
      eps: stabilises the divisions.
      s_init: the initial scale.
      num_betas: number of decay rates ``1 - 0.1 ** k``, ``k = 1..num_betas``, run side by
        side (their scales are summed).

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a :class:`MechanicState`;
      ``update`` needs ``params`` and passes extra arguments to the base optimizer.

    References:
      Cutkosky et al., `Mechanic: A Learning Rate Tuner <https://arxiv.org/abs/2306.00144>`_,
      2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.mechanize(optax.sgd(0.1))
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> (torch.tensor([1.0, -2.0]) - params["w"]).abs().max() < 1e-4  # the step size grows
      tensor(True)
    """
    base_optimizer = base.with_extra_args_support(base_optimizer)

    def init_fn(params: base.Params) -> MechanicState:
        count = bb.zero_count(params)
        dtype = _casting.tree_dtype(params, "lowest")

        def per_beta(value: float) -> torch.Tensor:
            return torch.full((num_betas,), value, dtype=dtype, device=count.device)

        return MechanicState(
            base_optimizer_state=base_optimizer.init(params), count=count,
            r=per_beta(0.0), m=per_beta(0.0), v=per_beta(0.0),
            s=torch.ones((num_betas,), dtype=dtype, device=count.device) * s_init,
            # A distinct copy: ``x0`` must not alias params that may be updated in place.
            x0=tm.tree_map(torch.clone, params))

    def update_fn(updates: base.Updates, state: MechanicState,
                  params: Optional[base.Params] = None,
                  **extra_args: Any) -> tuple[base.Updates, MechanicState]:
        if params is None:
            raise ValueError(bb.NO_PARAMS_MSG + " (mechanize needs them.)")
        # The raw gradients are read again below: the base optimizer must not overwrite them.
        base_updates, base_state = base_optimizer.update(
            updates, state.base_optimizer_state, params,
            **extra_args)
        gs, spec = tm.float_leaves(updates)
        ps = tm.leaves_like(params, spec, "params", reference=updates)
        base_steps = tm.leaves_like(base_updates, spec, "the base optimizer's updates",
                                    reference=updates)
        # Start from the params of the first update, not those given to ``init``: training
        # loops often load pretrained weights after building the optimizer.
        x0 = control_flow.cond(state.count == 0, lambda: ps,
                               lambda: tm.leaves_like(state.x0, spec, "state.x0", updates))
        s_sum = torch.sum(state.s)
        decay = weight_decay * s_sum * torch.sqrt(tm.sum_of_squares(gs)) / (
            torch.sqrt(tm.sum_of_squares(ps)) + eps)
        gs = tm.add(gs, tm.mul(ps, tm.scalar_like(decay, ps)))
        # The memory-efficient variant: the accumulated update is recomputed from ``x0``.
        delta_prev = tm.div(tm.sub(x0, ps), tm.scalar_like(s_sum + eps, ps))
        delta = tm.sub(delta_prev, base_steps)
        h = tm.sum_scalars([torch.vdot(g.reshape(-1), d.reshape(-1))
                            for g, d in zip(gs, delta_prev)])
        # Clipping ``h`` to ``[-m, m]`` came after the paper.
        clipped_h = torch.minimum(torch.maximum(torch.ones_like(state.m) * h, -state.m), state.m)
        betas = torch.tensor([1.0 - 0.1 ** k for k in range(1, num_betas + 1)],
                             dtype=state.s.dtype, device=state.s.device)
        m = torch.maximum(betas * state.m, torch.abs(h) + eps)
        v = betas ** 2 * state.v + h ** 2
        r = betas * state.r + clipped_h * state.s
        wealth = (s_init / num_betas) * m + torch.clamp_min(r, 0.0)
        s = wealth / (torch.sqrt(v) + eps)
        new_params = tm.sub(x0, tm.mul(delta, tm.scalar_like(torch.sum(s), delta)))
        return tm.unflatten(spec, tm.sub(new_params, ps)), MechanicState(
            base_optimizer_state=base_state, count=numerics.safe_increment(state.count),
            r=r, m=m, v=v, s=s, x0=tm.unflatten(spec, x0))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
