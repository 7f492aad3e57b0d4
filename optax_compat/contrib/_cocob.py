"""COCOB-Backprop: learning-rate-free optimisation by continuous coin betting.

Mirrors ``optax/contrib/_cocob.py``. The arithmetic runs over lists of leaves through
:mod:`optax_compat._runtime.tree_math`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, transform
from optax_compat.transforms import _adding, _combining

Scalar = Union[float, torch.Tensor]


class COCOBState(NamedTuple):
    """The state of COntinuous COin Betting (one tensor per parameter for each field)."""

    init_particles: base.Updates
    cumulative_gradients: base.Updates
    scale: base.Updates
    subgradients: base.Updates
    reward: base.Updates


def scale_by_cocob(alpha: Scalar = 100.0, eps: Scalar = 1e-8) -> base.GradientTransformation:
    """Rescales updates by COCOB-Backprop (Algorithm 2 of Orabona and Tommasi).

    Each coordinate bets a fraction of its accumulated reward on the sign of the negative
    cumulative gradient; the update moves the params to the new bet around their initial
    value. See :func:`cocob`.

    Args:
      alpha: bounds the fraction of the wealth that is bet early on.
      eps: initial value of the running maximum of the gradient magnitudes (avoids dividing
        by zero).

    Returns:
      A transformation with a :class:`COCOBState`; ``update`` needs ``params``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.scale_by_cocob()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([-0.0100,  0.0100])
    """

    def init_fn(params: base.Params) -> COCOBState:
        xs, spec = tm.flatten(params)
        return COCOBState(
            init_particles=tm.unflatten(spec, tm.clone(xs)),
            cumulative_gradients=tm.unflatten(spec, tm.zeros_like(xs)),
            scale=tm.unflatten(spec, [torch.full_like(x, eps) for x in xs]),
            subgradients=tm.unflatten(spec, tm.zeros_like(xs)),
            reward=tm.unflatten(spec, tm.zeros_like(xs)))

    def update_fn(updates: base.Updates, state: COCOBState,
                  params: Optional[base.Params] = None):
        gs, spec = tm.float_leaves(updates)
        ps = bb.params_leaves(params, spec, updates, "scale_by_cocob")
        initial, cumulative, scales, subgradients, rewards = (
            bb.state_leaves(tree, spec, updates, f"state.{name}")
            for name, tree in zip(COCOBState._fields, state))
        magnitudes = tm.abs(gs)
        scales = tm.maximum(scales, magnitudes)
        subgradients = tm.add(subgradients, magnitudes)
        rewards = tm.maximum(tm.sub(rewards, tm.mul(gs, tm.sub(ps, initial))), 0.0)
        cumulative = tm.sub(cumulative, gs)
        # The bet: p0 + C / (L * max(G + L, alpha * L)) * (L + R), returned as a displacement.
        betting_fractions = tm.div(cumulative, tm.mul(
            scales, tm.maximum(tm.add(subgradients, scales), tm.mul(scales, alpha))))
        bets = tm.add(initial, tm.mul(betting_fractions, tm.add(scales, rewards)))
        new_updates = tm.add(tm.neg(ps), bets)
        return tm.unflatten(spec, new_updates), COCOBState(
            init_particles=state.init_particles,
            cumulative_gradients=tm.unflatten(spec, cumulative),
            scale=tm.unflatten(spec, scales), subgradients=tm.unflatten(spec, subgradients),
            reward=tm.unflatten(spec, rewards))

    return base.GradientTransformation(init_fn, update_fn)


def cocob(
    learning_rate: base.ScalarOrSchedule = 1.0,
    alpha: Scalar = 100.0,
    eps: Scalar = 1e-8,
    weight_decay: Scalar = 0.0,
    mask: Optional[Union[Any, Callable[[base.Params], Any]]] = None,
) -> base.GradientTransformationExtraArgs:
    """COCOB-Backprop: stochastic subgradient descent without a learning rate, by coin betting.

    Finding the minimiser of a (non-smooth) objective is cast as a gambling game on the
    subgradients; a good betting strategy then needs no step size. ``learning_rate`` only
    rescales the incoming gradients (e.g. to inject a schedule).

    Args:
      learning_rate: multiplies the gradients before the betting step (a number or a
        schedule).
      alpha: bounds the fraction of the wealth that is bet early on.
      eps: initial value of the running maximum of the gradient magnitudes.
      weight_decay: strength of the L2 penalty added to the gradients.
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Orabona et al, `Training Deep Networks without Learning Rates Through Coin Betting
      <https://arxiv.org/abs/1705.07795>`_, 2017.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.cocob()
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.9694, -1.9693])
    """
    return _combining.chain(
        _adding.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate, flip_sign=False),
        scale_by_cocob(alpha, eps),
    )
