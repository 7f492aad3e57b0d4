"""Prodigy: D-Adaptation AdamW that adapts the learning rate faster.

Mirrors ``optax/contrib/_prodigy.py``. The arithmetic runs over lists of leaves through
:mod:`optax_compat._runtime.tree_math`; the distance estimate and its numerator
are 0-d tensors
in the lowest floating dtype of the params.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics
from optax_compat.contrib._dadapt_adamw import (
    adam_step_correction,
    decayed_descent,
    scalar_state,
)
from optax_compat.tree_utils import _tree_math

Scalar = float | torch.Tensor


class ProdigyState(NamedTuple):
    """The state of :func:`prodigy`.

    Attributes:
      exp_avg: first moment of the distance-scaled gradients.
      exp_avg_sq: second moment of the distance-scaled gradients.
      grad_sum: exponential moving average of the weighted, distance-scaled gradients.
      params0: the initial params.
      estim_lr: the current estimate of the distance to the solution (0-d).
      numerator_weighted: the running numerator of that estimate (0-d).
      count: step count (0-d ``int32``).
    """

    exp_avg: base.Updates
    exp_avg_sq: base.Updates
    grad_sum: base.Updates
    params0: base.Updates
    estim_lr: torch.Tensor
    numerator_weighted: torch.Tensor
    count: torch.Tensor


def prodigy(
    learning_rate: base.ScalarOrSchedule = 1.0,
    betas: tuple[Scalar, Scalar] = (0.9, 0.999),
    beta3: Optional[Scalar] = None,
    eps: Scalar = 1e-8,
    estim_lr0: Scalar = 1e-6,
    estim_lr_coef: Scalar = 1.0,
    weight_decay: Scalar = 0.0,
    safeguard_warmup: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Learning-rate-free AdamW with Prodigy.

    A D-Adaptation AdamW whose distance estimate weights recent gradients more (through the
    displacement from the initial params), so that it grows faster. Best used with a schedule
    whose peak value is 1.

    Args:
      learning_rate: a schedule multiplier (a number or a schedule), e.g. a linear decay from
        1 to 0 with a short warmup.
      betas: Adam's decays of the first and second moments.
      beta3: decay of the estimate's statistics (``None``: ``sqrt(betas[1])``).
      eps: added to Adam's denominator (scaled by the distance estimate).
      estim_lr0: the initial (under-)estimate of the learning rate.
      estim_lr_coef: multiplies the learning-rate estimates.
      weight_decay: AdamW-style decoupled weight decay (multiplied by the adapted step).
      safeguard_warmup: leave the scheduled learning rate out of the estimate's denominator,
        which avoids overestimates during warmup.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a :class:`ProdigyState`;
      ``update`` needs ``params`` and ignores extra arguments.

    References:
      Mishchenko et al, `Prodigy: An Expeditiously Adaptive Parameter-Free Learner
      <https://arxiv.org/abs/2306.06101>`_, 2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.prodigy()
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> (torch.tensor([1.0, -2.0]) - params["w"]).abs().max() < 1e-4  # the step size grows
      tensor(True)
    """
    beta1, beta2 = betas
    if beta3 is None:
        beta3 = beta2**0.5

    def init_fn(params: base.Params) -> ProdigyState:
        xs, spec = tm.flatten(params)
        return ProdigyState(
            exp_avg=bb.zeros(params), exp_avg_sq=bb.zeros(params),
            grad_sum=bb.zeros(params), params0=tm.unflatten(spec, tm.clone(xs)),
            estim_lr=scalar_state(params, estim_lr0),
            numerator_weighted=scalar_state(params, 0.0), count=bb.zero_count(params))

    @bb.global_reduction("estimates its step size from tree-wide dot products")
    def update_fn(updates: base.Updates, state: ProdigyState,
                  params: Optional[base.Params] = None, **extra_args: Any):
        del extra_args
        gs, spec = tm.float_leaves(updates)
        ps = bb.params_leaves(params, spec, updates, "prodigy")
        exp_avgs = bb.state_leaves(state.exp_avg, spec, updates, "state.exp_avg")
        exp_avg_sqs = bb.state_leaves(state.exp_avg_sq, spec, updates,
                                              "state.exp_avg_sq")
        grad_sums = bb.state_leaves(state.grad_sum, spec, updates, "state.grad_sum")
        initial = bb.state_leaves(state.params0, spec, updates, "state.params0")
        schedule = bb.value_at(learning_rate, state.count)
        count_inc = numerics.safe_increment(state.count)
        estim_lr = state.estim_lr
        step = (estim_lr * schedule * adam_step_correction(betas, count_inc, gs)
                ).to(estim_lr.dtype)
        scaled_grads = tm.mul(gs, estim_lr)
        numerator_increment = _tree_math.tree_vdot(gs, tm.sub(initial, ps))
        exp_avgs = tm.add(tm.mul(exp_avgs, beta1), tm.mul(scaled_grads, 1 - beta1))
        exp_avg_sqs = tm.add(tm.mul(exp_avg_sqs, beta2),
                             tm.mul(tm.mul(scaled_grads, 1 - beta2), scaled_grads))
        sum_weight = estim_lr if safeguard_warmup else step
        grad_sums = tm.add(tm.mul(grad_sums, beta3),
                           tm.div(tm.mul(scaled_grads, sum_weight), estim_lr0))
        numerator = (beta3 * state.numerator_weighted
                     + (estim_lr / estim_lr0) * step * numerator_increment)
        denominator = _tree_math.tree_sum(tm.abs(grad_sums))
        new_estim_lr = torch.maximum(estim_lr, estim_lr_coef * numerator / denominator)
        ratios = tm.div(tm.mul(exp_avgs, step),
                        tm.add(tm.sqrt(exp_avg_sqs), new_estim_lr * eps))
        directions = decayed_descent(ratios, ps, weight_decay, step)
        return tm.unflatten(spec, directions), ProdigyState(
            exp_avg=tm.unflatten(spec, exp_avgs), exp_avg_sq=tm.unflatten(spec, exp_avg_sqs),
            grad_sum=tm.unflatten(spec, grad_sums), params0=state.params0,
            estim_lr=new_estim_lr, numerator_weighted=numerator, count=count_inc)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
