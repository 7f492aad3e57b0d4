"""D-Adaptation for AdamW: a learning-rate-free AdamW.

Mirrors ``optax/contrib/_dadapt_adamw.py``. The arithmetic runs over lists of leaves through
:mod:`optax_compat._runtime.tree_math`; the distance estimate and its numerator
are 0-d tensors
in the lowest floating dtype of the params (so they never promote the params).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics
from optax_compat.tree_utils import _casting, _tree_math

Scalar = float | torch.Tensor


class DAdaptAdamWState(NamedTuple):
    """The state of :func:`dadapt_adamw`.

    Attributes:
      exp_avg: first moment of the (distance-scaled) gradients.
      exp_avg_sq: second moment of the gradients.
      grad_sum: exponential moving average of the distance-scaled gradients.
      estim_lr: the current estimate of the distance to the solution (0-d).
      numerator_weighted: the running numerator of that estimate (0-d).
      count: step count (0-d ``int32``).
    """

    exp_avg: base.Updates
    exp_avg_sq: base.Updates
    grad_sum: base.Updates
    estim_lr: torch.Tensor
    numerator_weighted: torch.Tensor
    count: torch.Tensor


def scalar_state(params: base.Params, value: Scalar) -> torch.Tensor:
    """``value`` as a 0-d tensor in the lowest floating dtype of ``params``, on their device.

    D-Adaptation, Prodigy, DoG, DoWG and Momo keep their scalar statistics in that dtype so
    that updating the params never promotes them.
    """
    dtype = _casting.tree_dtype(params, "lowest")
    return torch.as_tensor(value, dtype=dtype, device=bb.device_of(params)).clone()


def adam_step_correction(betas: tuple[Scalar, Scalar], count_inc: torch.Tensor,
                         xs: tm.Leaves) -> torch.Tensor:
    """``sqrt(1 - beta2 ** t) / (1 - beta1 ** t)``: Adam's bias corrections folded in a step.

    Evaluated in the widest precision of the leaves (JAX's default float), as Optax does.
    """
    beta1, beta2 = betas
    count = count_inc.to(tm.widest_real_dtype(xs))
    return (1 - beta2**count) ** 0.5 / (1 - beta1**count)


def decayed_descent(ratios: tm.Leaves, params: tm.Leaves, weight_decay: Scalar,
                    step: torch.Tensor) -> tm.Leaves:
    """``-(ratios + weight_decay * step * params)``: the descent direction with decoupled
    weight decay scaled by the step size (no pass over the params without decay)."""
    if bb.is_zero(weight_decay):
        return tm.neg(ratios)
    return tm.sub(tm.mul(params, -weight_decay * step), ratios)


def dadapt_adamw(
    learning_rate: base.ScalarOrSchedule = 1.0,
    betas: tuple[Scalar, Scalar] = (0.9, 0.999),
    eps: Scalar = 1e-8,
    estim_lr0: Scalar = 1e-6,
    weight_decay: Scalar = 0.0,
) -> base.GradientTransformationExtraArgs:
    """Learning-rate-free AdamW by D-Adaptation.

    The base learning rate of AdamW is replaced by a running lower bound on the distance to
    the solution (in the infinity norm), estimated from the inner products of the gradients
    with their weighted sum. Best used with a schedule whose peak value is 1.

    Args:
      learning_rate: a schedule multiplier (a number or a schedule), e.g. a linear decay from
        1 to 0 with a short warmup.
      betas: Adam's decays of the first and second moments.
      eps: added to Adam's denominator.
      estim_lr0: the initial (under-)estimate of the learning rate.
      weight_decay: AdamW-style decoupled weight decay (multiplied by the adapted step); to
        decay the gradients instead, chain with ``add_decayed_weights``.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a
      :class:`DAdaptAdamWState`; ``update`` needs ``params`` and ignores extra arguments.

    References:
      Defazio et al, `Learning-Rate-Free Learning by D-Adaptation
      <https://arxiv.org/abs/2301.07733>`_, 2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.dadapt_adamw(learning_rate=1.0)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> (torch.tensor([1.0, -2.0]) - params["w"]).abs().max() < 1e-4  # the step size grows
      tensor(True)
    """
    beta1, beta2 = betas
    root_beta2 = beta2**0.5

    def init_fn(params: base.Params) -> DAdaptAdamWState:
        return DAdaptAdamWState(
            exp_avg=bb.zeros(params), exp_avg_sq=bb.zeros(params),
            grad_sum=bb.zeros(params), estim_lr=scalar_state(params, estim_lr0),
            numerator_weighted=scalar_state(params, 0.0),
            count=bb.zero_count(params))

    @bb.global_reduction("estimates its step size from tree-wide dot products")
    def update_fn(updates: base.Updates, state: DAdaptAdamWState,
                  params: Optional[base.Params] = None, **extra_args: Any):
        del extra_args
        gs, spec = tm.float_leaves(updates)
        ps = bb.params_leaves(params, spec, updates, "dadapt_adamw")
        exp_avgs = bb.state_leaves(state.exp_avg, spec, updates, "state.exp_avg")
        exp_avg_sqs = bb.state_leaves(state.exp_avg_sq, spec, updates,
                                              "state.exp_avg_sq")
        grad_sums = bb.state_leaves(state.grad_sum, spec, updates, "state.grad_sum")
        schedule = bb.value_at(learning_rate, state.count)
        count_inc = numerics.safe_increment(state.count)
        numerator = state.numerator_weighted
        step = (state.estim_lr * schedule * adam_step_correction(betas, count_inc, gs)
                ).to(numerator.dtype)
        weighted_sums = tm.div(grad_sums, tm.add(tm.sqrt(exp_avg_sqs), eps))
        numerator_increment = _tree_math.tree_vdot(gs, weighted_sums)
        exp_avgs = tm.add(tm.mul(exp_avgs, beta1), tm.mul(gs, (1 - beta1) * step))
        exp_avg_sqs = tm.add(tm.mul(exp_avg_sqs, beta2), tm.mul(tm.mul(gs, 1 - beta2), gs))
        grad_sums = tm.add(tm.mul(grad_sums, root_beta2), tm.mul(gs, (1 - root_beta2) * step))
        grad_sum_l1 = _tree_math.tree_sum(tm.abs(grad_sums))
        numerator = root_beta2 * numerator + (1 - root_beta2) * step * numerator_increment
        estim_lr = torch.maximum(state.estim_lr,
                                 numerator / ((1 - root_beta2) * grad_sum_l1))
        ratios = tm.div(exp_avgs, tm.add(tm.sqrt(exp_avg_sqs), eps))
        directions = decayed_descent(ratios, ps, weight_decay, step)
        return tm.unflatten(spec, directions), DAdaptAdamWState(
            exp_avg=tm.unflatten(spec, exp_avgs), exp_avg_sq=tm.unflatten(spec, exp_avg_sqs),
            grad_sum=tm.unflatten(spec, grad_sums), estim_lr=estim_lr,
            numerator_weighted=numerator, count=count_inc)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
