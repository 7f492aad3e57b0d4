"""AdEMAMix and Simplified AdEMAMix: Adam with a mixture of a fast and a slow momentum.

Mirrors ``optax/contrib/_ademamix.py``. The arithmetic runs over lists of leaves through
:mod:`optax_compat._runtime.tree_math`; hyperparameters given as schedules are
evaluated at the
step count kept in the state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics, transform
from optax_compat.transforms import _adding, _combining

Scalar = Union[float, torch.Tensor]
MaskOrFn = Optional[Union[Any, Callable[[base.Params], Any]]]


def _mix(xs: tm.Leaves, weight: Scalar, ys: tm.Leaves) -> tm.Leaves:
    """``x + weight * y`` with a tensor ``weight`` rounded to the leaves' dtypes (as JAX)."""
    return tm.add(xs, tm.mul(ys, tm.scalar_like(weight, ys)))


class ScaleByAdemamixState(NamedTuple):
    """The state of AdEMAMix.

    Attributes:
      count: step count of the fast EMA and of the second moment (0-d ``int32``).
      count_m2: step count of the slow EMA and of the ``b3``/``alpha`` schedules.
      m1: fast EMA of the gradients.
      m2: slow EMA of the gradients.
      nu: EMA of the squared gradients.
    """

    count: torch.Tensor
    count_m2: torch.Tensor
    m1: base.Updates
    m2: base.Updates
    nu: base.Updates


def scale_by_ademamix(
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    b3: base.ScalarOrSchedule = 0.9999,
    alpha: base.ScalarOrSchedule = 6.0,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    mu_dtype: Optional[torch.dtype] = None,
) -> base.GradientTransformationExtraArgs:
    """Rescales updates by AdEMAMix: ``(m1_hat + alpha * m2) / (sqrt(nu_hat + eps_root) + eps)``.

    See :func:`ademamix` for the algorithm. The slow EMA ``m2`` is not bias-corrected.

    Args:
      b1: decay of the fast EMA.
      b2: decay of the second moment.
      b3: decay of the slow EMA (a number or a schedule).
      alpha: weight of the slow EMA in the mixture (a number or a schedule).
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      mu_dtype: dtype of the three accumulators at initialisation (``None``: that of the
        params); as in Optax the updated accumulators take the promoted dtype.

    Returns:
      A transformation with a :class:`ScaleByAdemamixState`; ``update`` accepts ``inplace``.

    References:
      Pagliardini et al, `The AdEMAMix Optimizer: Better, Faster, Older
      <https://arxiv.org/abs/2409.03137>`_, 2024.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.scale_by_ademamix()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1.0006, -1.0006])
    """
    mu_dtype = bb.canonical_dtype(mu_dtype)

    def init_fn(params: base.Params) -> ScaleByAdemamixState:
        return ScaleByAdemamixState(
            count=bb.zero_count(params), count_m2=bb.zero_count(params),
            m1=bb.zeros(params, mu_dtype), m2=bb.zeros(params, mu_dtype),
            nu=bb.zeros(params, mu_dtype))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates: base.Updates, state: ScaleByAdemamixState,
                  params: Optional[base.Params] = None, *, inplace: bool = False,
                  **extra_args: Any):
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        m1s = bb.state_leaves(state.m1, spec, updates, "state.m1")
        m2s = bb.state_leaves(state.m2, spec, updates, "state.m2")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        slow_decay = bb.value_at(b3, state.count_m2)
        mixing = bb.value_at(alpha, state.count_m2)
        count_inc = numerics.safe_int32_increment(state.count)
        count_m2_inc = numerics.safe_int32_increment(state.count_m2)
        # In the widest dtypes of the new moments, which promote ``gs`` with ``m1s``, ``nus``.
        m1_correction = bb.bias_correction(b1, count_inc, gs + m1s)
        nu_correction = bb.bias_correction(b2, count_inc, gs + nus)

        def formula(gs: tm.Leaves, m1s: tm.Leaves, m2s: tm.Leaves, nus: tm.Leaves,
                    inplace: bool) -> tuple[tm.Leaves, ...]:
            del inplace
            new_m1s = bb.moving_average(m1s, gs, b1)
            new_m2s = bb.moving_average(m2s, gs, slow_decay)
            new_nus = bb.moving_average(nus, tm.abs_sq(gs), b2)
            scaled = bb.adam_ratio(_mix(bb.debias(new_m1s, m1_correction), mixing, new_m2s),
                                   bb.debias(new_nus, nu_correction), eps, eps_root)
            return scaled, new_m1s, new_m2s, new_nus

        scaled, new_m1s, new_m2s, new_nus = bb.in_blocks(formula, gs, m1s, m2s, nus,
                                                         inplace=inplace)
        return tm.unflatten(spec, scaled), ScaleByAdemamixState(
            count=count_inc, count_m2=count_m2_inc, m1=tm.unflatten(spec, new_m1s),
            m2=tm.unflatten(spec, new_m2s), nu=tm.unflatten(spec, new_nus))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def ademamix(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    b3: base.ScalarOrSchedule = 0.9999,
    alpha: base.ScalarOrSchedule = 5.0,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    mu_dtype: Optional[Any] = None,
    weight_decay: Scalar = 0.0,
    mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    r"""AdEMAMix: AdamW whose momentum mixes a fast and a slow EMA of the gradients.

    With fast and slow EMAs :math:`m_1, m_2` (decays :math:`\beta_1, \beta_3`), the second
    moment :math:`\nu` (decay :math:`\beta_2`) and Adam's bias corrections of :math:`m_1`
    and :math:`\nu`, the step is
    :math:`-\eta\,((\hat m_1 + \alpha m_2) / (\sqrt{\hat\nu + \bar\varepsilon} + \varepsilon)
    + \lambda\theta)`. Very old gradients keep contributing through :math:`m_2`, which suits
    long runs; ``b3`` and ``alpha`` may be scheduled (warmed up) as in the paper.

    Args:
      learning_rate: a fixed step size or a schedule of the step count.
      b1: decay of the fast EMA.
      b2: decay of the second moment.
      b3: decay of the slow EMA (a number or a schedule).
      alpha: weight of the slow EMA (a number or a schedule).
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      mu_dtype: dtype of the accumulators (``None``: that of the params).
      weight_decay: strength of the decoupled weight decay (multiplied by the learning rate).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Pagliardini et al, `The AdEMAMix Optimizer: Better, Faster, Older
      <https://arxiv.org/abs/2409.03137>`_, 2024.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.ademamix(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7013, -1.7003])
    """
    return _combining.chain(
        scale_by_ademamix(b1=b1, b2=b2, b3=b3, alpha=alpha, eps=eps, eps_root=eps_root,
                          mu_dtype=mu_dtype),
        _adding.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate),
    )


class ScaleBySimplifiedAdEMAMixState(NamedTuple):
    """The state of Simplified AdEMAMix.

    Attributes:
      t: step count (0-d ``int32``).
      m: accumulated (undamped) momentum ``m = b1 * m + g``.
      n: EMA of the squared gradients.
    """

    t: torch.Tensor
    m: base.Updates
    n: base.Updates


def scale_by_simplified_ademamix(
    b1: Scalar = 0.99,
    b2: Scalar = 0.95,
    alpha: base.ScalarOrSchedule = 0.0,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
) -> base.GradientTransformation:
    """Rescales updates by Simplified AdEMAMix.

    The update is ``(m + alpha * g) / (sqrt(n_hat + eps_root) + eps)`` with the undamped
    momentum ``m = b1 * m + g``; see :func:`simplified_ademamix`.

    Args:
      b1: decay of the momentum ``m = b1 * m + g``.
      b2: decay of the second moment.
      alpha: weight of the current gradient (a number or a schedule).
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.

    Returns:
      A transformation with a :class:`ScaleBySimplifiedAdEMAMixState`.

    References:
      Morwani et al, `Connections between Schedule-Free Optimizers, AdEMAMix, and Accelerated
      SGD Variants <https://arxiv.org/abs/2502.02431>`_, 2025.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.scale_by_simplified_ademamix()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 1., -1.])
    """

    def init_fn(params: base.Params) -> ScaleBySimplifiedAdEMAMixState:
        return ScaleBySimplifiedAdEMAMixState(t=bb.zero_count(params),
                                              m=bb.zeros(params),
                                              n=bb.zeros(params))

    @bb.elementwise
    def update_fn(updates: base.Updates, state: ScaleBySimplifiedAdEMAMixState,
                  params: Optional[base.Params] = None):
        del params
        gs, spec = tm.float_leaves(updates)
        ms = bb.state_leaves(state.m, spec, updates, "state.m")
        ns = bb.state_leaves(state.n, spec, updates, "state.n")
        mixing = bb.value_at(alpha, state.t)
        new_ms = _mix(gs, b1, ms)
        squares = tm.square(gs)
        # Optax's ``lerp(b2, g * g, n)``: ``g * g + b2 * (n - g * g)``.
        new_ns = _mix(squares, b2, tm.sub(ns, squares))
        count_inc = numerics.safe_increment(state.t)
        n_hats = bb.debias(new_ns, bb.bias_correction(b2, count_inc, new_ns))
        scaled = bb.adam_ratio(_mix(new_ms, mixing, gs), n_hats, eps, eps_root)
        return tm.unflatten(spec, scaled), ScaleBySimplifiedAdEMAMixState(
            t=count_inc, m=tm.unflatten(spec, new_ms), n=tm.unflatten(spec, new_ns))

    return base.GradientTransformation(init_fn, update_fn)


def simplified_ademamix(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.99,
    b2: Scalar = 0.95,
    alpha: base.ScalarOrSchedule = 0.0,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    weight_decay: Scalar = 0.0,
    mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    r"""Simplified AdEMAMix: one undamped momentum buffer mixed with the current gradient.

    With :math:`m_t = \beta_1 m_{t-1} + g_t` and Adam's bias-corrected second moment
    :math:`\hat\nu_t`, the step is
    :math:`-\eta\,((m_t + \alpha g_t) / (\sqrt{\hat\nu_t + \bar\varepsilon} + \varepsilon)
    + \lambda\theta)`; ``alpha = 0`` recovers Adam up to a rescaling of :math:`\eta` and
    :math:`\beta_1`.

    Args:
      learning_rate: a fixed step size or a schedule of the step count.
      b1: decay of the momentum.
      b2: decay of the second moment.
      alpha: weight of the current gradient (a number or a schedule).
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      weight_decay: strength of the decoupled weight decay (multiplied by the learning rate).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Morwani et al, `Connections between Schedule-Free Optimizers, AdEMAMix, and Accelerated
      SGD Variants <https://arxiv.org/abs/2502.02431>`_, 2025.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.simplified_ademamix(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.4057, -1.4040])
    """
    return _combining.chain(
        scale_by_simplified_ademamix(b1=b1, b2=b2, alpha=alpha, eps=eps, eps_root=eps_root),
        _adding.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate),
    )
