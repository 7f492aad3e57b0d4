"""MADGRAD: a momentumized, adaptive, dual-averaged gradient method.

Mirrors ``optax/contrib/_madgrad.py``. The arithmetic runs over lists of leaves through
:mod:`optax_compat._runtime.tree_math`.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics
from optax_compat.transforms import _adding, _combining


class MadgradState(NamedTuple):
    """The state of MADGRAD.

    Attributes:
      count: step count (0-d ``int32``).
      grad_sum_sq: weighted sum of the squared gradients.
      s: weighted sum of the gradients.
      x0: the initial params.
    """

    count: torch.Tensor
    grad_sum_sq: base.Updates
    s: base.Updates
    x0: base.Params


def scale_by_madgrad(
    learning_rate: base.ScalarOrSchedule,
    momentum: float = 0.9,
    eps: float = 1e-6,
) -> base.GradientTransformation:
    """Rescales updates by MADGRAD; the result is the displacement of the params.

    With ``lamb = (lr + eps) * sqrt(k + 1)``: ``G += lamb * g**2``, ``s += lamb * g``,
    ``z = x0 - s / (cbrt(G) + eps)`` and the new params are
    ``(1 - momentum) * z + momentum * x``; the update is their difference with ``x``.

    Args:
      learning_rate: a fixed step size or a schedule of the step count.
      momentum: weight of the current params in the new params.
      eps: added to the learning rate and to the denominator.

    Returns:
      A transformation with a :class:`MadgradState`; ``update`` needs ``params``.

    References:
      Defazio et al, `Adaptivity without Compromise: A Momentumized, Adaptive, Dual Averaged
      Gradient Method for Stochastic Optimization <https://arxiv.org/abs/2101.11075>`_, 2021.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.scale_by_madgrad(learning_rate=0.1)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([-0.0171,  0.0215])
    """

    def init_fn(params: base.Params) -> MadgradState:
        xs, spec = tm.flatten(params)
        return MadgradState(count=bb.zero_count(params),
                            grad_sum_sq=bb.zeros(params), s=bb.zeros(params),
                            x0=tm.unflatten(spec, tm.clone(xs)))

    def update_fn(updates: base.Updates, state: MadgradState,
                  params: Optional[base.Params] = None):
        gs, spec = tm.float_leaves(updates)
        ps = bb.params_leaves(params, spec, updates, "scale_by_madgrad")
        sums_sq = bb.state_leaves(state.grad_sum_sq, spec, updates,
                                          "state.grad_sum_sq")
        sums = bb.state_leaves(state.s, spec, updates, "state.s")
        initial = bb.state_leaves(state.x0, spec, updates, "state.x0")
        rate = bb.value_at(learning_rate, state.count)
        stable_rate = rate + eps
        # ``jnp.sqrt`` of Optax's int32 ``count + 1`` is float32 whatever the precision mode,
        # and wins over a weakly typed rate (a float64 schedule value in 64-bit mode), not
        # over a strong one: the rate decides, as ``rate + eps`` is a new, unmarked tensor.
        root_steps = torch.sqrt((state.count + 1).to(torch.float32))
        dtype = bb.result_dtype(rate, root_steps)
        weight = tm.scalar_like(bb.as_weak(stable_rate).to(dtype) * root_steps.to(dtype), gs)
        sums_sq = tm.add(sums_sq, tm.mul(tm.square(gs), weight))
        sums = tm.add(sums, tm.mul(gs, weight))
        # ``cbrt`` as a power: the accumulated squares are never negative.
        sigmas = tm.add(tm.power(sums_sq, 1 / 3), eps)
        duals = tm.sub(initial, tm.div(sums, sigmas))
        new_params = tm.add(tm.mul(duals, 1 - momentum), tm.mul(ps, momentum))
        return tm.unflatten(spec, tm.sub(new_params, ps)), MadgradState(
            count=numerics.safe_increment(state.count), grad_sum_sq=tm.unflatten(spec, sums_sq),
            s=tm.unflatten(spec, sums), x0=state.x0)

    return base.GradientTransformation(init_fn, update_fn)


def madgrad(
    learning_rate: base.ScalarOrSchedule,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    eps: float = 1e-6,
) -> base.GradientTransformationExtraArgs:
    """The MADGRAD optimizer: dual averaging with momentum and a cube-root adaptive scaling.

    Matches SGD with momentum on vision tasks and Adam on language tasks.

    Args:
      learning_rate: a fixed step size or a schedule of the step count.
      momentum: weight of the current params in the new params.
      weight_decay: strength of the L2 penalty added to the gradients.
      eps: added to the learning rate and to the denominator.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Defazio et al, `Adaptivity without Compromise: A Momentumized, Adaptive, Dual Averaged
      Gradient Method for Stochastic Optimization <https://arxiv.org/abs/2101.11075>`_, 2021.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.madgrad(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.8652, -1.8296])
    """
    return _combining.chain(
        _adding.add_decayed_weights(weight_decay),
        scale_by_madgrad(learning_rate=learning_rate, momentum=momentum, eps=eps),
    )
