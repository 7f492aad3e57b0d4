"""ACProp: AdaBelief with an asynchronous (one step old) denominator.

Mirrors ``optax/contrib/_acprop.py``. The arithmetic runs over lists of leaves through
:mod:`optax_compat._runtime.tree_math`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics, transform
from optax_compat.transforms import _adding, _combining

Scalar = Union[float, torch.Tensor]


def scale_by_acprop(
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-16,
    eps_root: Scalar = 1e-16,
) -> base.GradientTransformationExtraArgs:
    """Rescales updates by ACProp: the gradient over the root of the *previous* belief moment.

    See :func:`acprop` for the algorithm.

    Args:
      b1: decay of the first moment.
      b2: decay of the second central moment (the squared prediction error).
      eps: added to the denominator outside the square root.
      eps_root: added to the second central moment (keep it non-zero to differentiate
        through the update).

    Returns:
      A transformation whose state is a :class:`~optax_compat.ScaleByBeliefState`; its
      ``update`` accepts ``inplace``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.scale_by_acprop()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.5000, -1.0000])
    """

    def init_fn(params: base.Params) -> transform.ScaleByBeliefState:
        return transform.ScaleByBeliefState(count=bb.zero_count(params),
                                            mu=bb.zeros(params),
                                            nu=bb.zeros(params))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates: base.Updates, state: transform.ScaleByBeliefState,
                  params: Optional[base.Params] = None, *, inplace: bool = False,
                  **extra_args: Any):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        count_inc = numerics.safe_increment(state.count)
        # The denominator uses the previous moment; at the first step (no moment yet) it is
        # one, and the bias correction uses count 1 there so nothing divides by zero.
        initial = state.count == 0
        previous_count = torch.where(initial, count_inc, state.count)
        correction = bb.bias_correction(b2, previous_count, nus)

        def formula(gs: tm.Leaves, mus: tm.Leaves, nus: tm.Leaves,
                    inplace: bool) -> tuple[tm.Leaves, tm.Leaves, tm.Leaves]:
            del inplace
            new_mus = bb.moving_average(mus, gs, b1)
            # The prediction error is measured against the moment *before* this gradient.
            errors = tm.sub(gs, mus)
            new_nus = tm.add(bb.moving_average(nus, tm.abs_sq(errors), b2), eps_root)
            nu_hats = [torch.where(initial, 1.0, nu_hat) for nu_hat in bb.debias(nus, correction)]
            return tm.div(gs, tm.add(tm.sqrt(nu_hats), eps)), new_mus, new_nus

        scaled, new_mus, new_nus = bb.in_blocks(formula, gs, mus, nus, inplace=inplace)
        return tm.unflatten(spec, scaled), transform.ScaleByBeliefState(
            count=count_inc, mu=tm.unflatten(spec, new_mus), nu=tm.unflatten(spec, new_nus))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def acprop(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-16,
    eps_root: Scalar = 1e-16,
    weight_decay: Scalar = 0.0,
    mask: Optional[Union[Any, Callable[[base.Params], Any]]] = None,
) -> base.GradientTransformationExtraArgs:
    r"""The ACProp optimizer: momentum centering with an asynchronous update.

    With :math:`m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t`,
    :math:`s_t = \beta_2 s_{t-1} + (1 - \beta_2)(g_t - m_{t-1})^2 + \bar\varepsilon` and
    :math:`\hat s_t = s_t / (1 - \beta_2^t)`, the update is
    :math:`-\alpha_t\, g_t / (\sqrt{\hat s_{t-1}} + \varepsilon)`: the denominator only uses
    information up to the previous step (it is one at the first step).

    Args:
      learning_rate: a fixed step size or a schedule of the step count.
      b1: decay of the first moment.
      b2: decay of the second central moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second central moment.
      weight_decay: strength of the decoupled weight decay (multiplied by the learning rate).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Zhuang et al, `Momentum Centering and Asynchronous Update for Adaptive Gradient Methods
      <https://arxiv.org/abs/2110.05454>`_, 2021.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.acprop(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.6366, -1.4319])
    """
    return _combining.chain(
        scale_by_acprop(b1=b1, b2=b2, eps=eps, eps_root=eps_root),
        _adding.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate),
    )
