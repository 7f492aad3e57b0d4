"""Distance over Gradients (DoG) and Distance over Weighted Gradients (DoWG).

Mirrors ``optax/contrib/_dog.py``: parameter-free step sizes from the largest distance
travelled from the initial params and the accumulated gradient norms. The norms are reduced
over all leaves with ``torch._foreach_norm``; every statistic is a 0-d tensor in the lowest
floating dtype of the params, and nothing in ``update`` synchronises with the device.

References:
  Ivgi et al., `DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule
  <https://arxiv.org/abs/2302.12022>`_, 2023.

  Khaled et al., `DoWG Unleashed: An Efficient Universal Parameter-Free Gradient Descent
  Method <https://arxiv.org/abs/2305.16284>`_, 2023.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, transform
from optax_compat.contrib._dadapt_adamw import scalar_state
from optax_compat.transforms import _adding, _combining

Scalar = Union[float, torch.Tensor]
InitStep = tuple[Literal["distance", "learning_rate", "heuristic"], Scalar]
MaskOrFn = Optional[Union[Any, Callable[[base.Params], Any]]]

_INIT_STEP_TYPES = ("distance", "learning_rate", "heuristic")


def _copy_of(params: base.Params) -> base.Params:
    xs, spec = tm.flatten(params)
    return tm.unflatten(spec, tm.clone(xs))


def _squared_distance(initial: tm.Leaves, ps: tm.Leaves) -> torch.Tensor:
    return tm.sum_of_squares(tm.sub(initial, ps))


def _weight_decay_step(weight_decay: Optional[Scalar],
                       mask: MaskOrFn) -> base.GradientTransformation:
    """``add_decayed_weights`` when a ``weight_decay`` is given, else the identity."""
    if weight_decay is None:
        return base.identity()
    return _adding.add_decayed_weights(weight_decay, mask)


class DoGState(NamedTuple):
    """The state of DoG.

    Attributes:
      is_init_step: whether the next update is the first (0-d bool).
      init_params: the initial params.
      max_dist: the largest distance from the initial params so far (0-d).
      sum_sq_norm_grads: the sum of the squared gradient norms so far (0-d).
    """

    is_init_step: torch.Tensor
    init_params: base.Params
    max_dist: torch.Tensor
    sum_sq_norm_grads: torch.Tensor


def scale_by_dog(init_step: InitStep, eps: Scalar = 1e-8) -> base.GradientTransformation:
    """Scales updates by DoG's step size ``max_dist / sqrt(sum_sq_norm_grads + eps)``.

    See :func:`dog` for the meaning of ``init_step``.

    Args:
      init_step: ``(tag, value)`` with tag ``"distance"``, ``"learning_rate"`` or
        ``"heuristic"``.
      eps: added to the sum of squared gradient norms.

    Returns:
      A transformation with a :class:`DoGState`; ``update`` needs ``params``.

    Raises:
      ValueError: for an unknown ``init_step`` tag.
    """
    init_step_type, init_step_value = init_step
    if init_step_type not in _INIT_STEP_TYPES:
        raise ValueError(f"Invalid init_step specification for scale_by_dog: {init_step_type=}"
                         f" (expected one of {_INIT_STEP_TYPES}).")

    def init_fn(params: base.Params) -> DoGState:
        if init_step_type == "distance":
            initial_distance = init_step_value
        elif init_step_type == "heuristic":
            initial_distance = init_step_value * (1 + torch.sqrt(
                tm.sum_of_squares(tm.leaves(params))))
        else:
            initial_distance = 0.0
        return DoGState(is_init_step=torch.ones((), dtype=torch.bool,
                                                device=bb.device_of(params)),
                        init_params=_copy_of(params),
                        max_dist=scalar_state(params, initial_distance),
                        sum_sq_norm_grads=scalar_state(params, 0.0))

    def update_fn(updates: base.Updates, state: DoGState,
                  params: Optional[base.Params] = None):
        gs, spec = tm.float_leaves(updates)
        ps = bb.params_leaves(params, spec, updates, "scale_by_dog")
        initial = bb.state_leaves(state.init_params, spec, updates, "state.init_params")
        max_dist = torch.maximum(state.max_dist, torch.sqrt(_squared_distance(initial, ps)))
        sum_sq_norm_grads = state.sum_sq_norm_grads + tm.sum_of_squares(gs)
        step_size = max_dist / torch.sqrt(sum_sq_norm_grads + eps)
        if init_step_type == "learning_rate":
            step_size = torch.where(state.is_init_step,
                                    torch.as_tensor(init_step_value, dtype=step_size.dtype,
                                                    device=step_size.device), step_size)
        return tm.unflatten(spec, tm.mul(gs, step_size)), DoGState(
            is_init_step=torch.zeros_like(state.is_init_step), init_params=state.init_params,
            max_dist=max_dist, sum_sq_norm_grads=sum_sq_norm_grads)

    return base.GradientTransformation(init_fn, update_fn)


def dog(
    learning_rate: base.ScalarOrSchedule = 1.0,
    init_step: InitStep = ("heuristic", 1e-6),
    eps: Scalar = 1e-8,
    weight_decay: Optional[Scalar] = None,
    mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    r"""Distance over Gradients (DoG): SGD with a parameter-free step size.

    .. math::
      \bar r_t = \max_{k \le t} \|x_k - x_0\|, \quad G_t = \sum_{k \le t} \|g_k\|^2, \quad
      x_{t+1} = x_t - \frac{\bar r_t}{\sqrt{G_t + \epsilon}}\, g_t.

    Args:
      learning_rate: multiplies DoG's step (a number or a schedule).
      init_step: ``(tag, value)``. ``"distance"`` sets the initial distance :math:`r_0` to
        ``value``; ``"learning_rate"`` sets the first step size to ``value``;
        ``"heuristic"`` sets :math:`r_0 = \text{value}\,(1 + \|x_0\|)` (1e-6 is suggested,
        1e-4 with batch normalisation). ``init`` must then receive the actual params.
      eps: added to the sum of squared gradient norms.
      weight_decay: strength of the L2 penalty added to the gradients (``None``: none).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation. The authors recommend averaging the
      iterates.

    References:
      Ivgi et al., `DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule
      <https://arxiv.org/abs/2302.12022>`_, 2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.dog()
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> (torch.tensor([1.0, -2.0]) - params["w"]).abs().max() < 1e-4  # the step size grows
      tensor(True)
    """
    return _combining.chain(
        _weight_decay_step(weight_decay, mask),
        scale_by_dog(init_step, eps),
        transform.scale_by_learning_rate(learning_rate),
    )


class DoWGState(NamedTuple):
    """The state of DoWG.

    Attributes:
      init_params: the initial params.
      weighted_sq_norm_grads: the sum of the squared gradient norms, each weighted by the
        squared distance estimate of its step (0-d).
      estim_sq_dist: the largest squared distance from the initial params so far (0-d).
    """

    init_params: base.Params
    weighted_sq_norm_grads: torch.Tensor
    estim_sq_dist: torch.Tensor


def scale_by_dowg(init_estim_sq_dist: Optional[Scalar] = None,
                  eps: Scalar = 1e-4) -> base.GradientTransformation:
    """Scales updates by DoWG's step size ``r2 / (sqrt(weighted_sq_norm_grads) + eps)``.

    Args:
      init_estim_sq_dist: initial guess of the squared distance to the solution
        (``None``: ``eps``).
      eps: added to the denominator of the step size.

    Returns:
      A transformation with a :class:`DoWGState`; ``update`` needs ``params``.
    """

    def init_fn(params: base.Params) -> DoWGState:
        initial_sq_dist = eps if init_estim_sq_dist is None else init_estim_sq_dist
        return DoWGState(init_params=_copy_of(params),
                         weighted_sq_norm_grads=scalar_state(params, 0.0),
                         estim_sq_dist=scalar_state(params, initial_sq_dist))

    def update_fn(updates: base.Updates, state: DoWGState,
                  params: Optional[base.Params] = None):
        gs, spec = tm.float_leaves(updates)
        ps = bb.params_leaves(params, spec, updates, "scale_by_dowg")
        initial = bb.state_leaves(state.init_params, spec, updates, "state.init_params")
        estim_sq_dist = torch.maximum(state.estim_sq_dist, _squared_distance(initial, ps))
        weighted_sq_norm_grads = (estim_sq_dist * tm.sum_of_squares(gs)
                                  + state.weighted_sq_norm_grads)
        step_size = estim_sq_dist / (torch.sqrt(weighted_sq_norm_grads) + eps)
        return tm.unflatten(spec, tm.mul(gs, step_size)), state._replace(
            estim_sq_dist=estim_sq_dist, weighted_sq_norm_grads=weighted_sq_norm_grads)

    return base.GradientTransformation(init_fn, update_fn)


def dowg(
    learning_rate: base.ScalarOrSchedule = 1.0,
    init_estim_sq_dist: Optional[Scalar] = None,
    eps: Scalar = 1e-4,
    weight_decay: Optional[Scalar] = None,
    mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    r"""Distance over Weighted Gradients (DoWG): a parameter-free, universal gradient method.

    .. math::
      \bar r_t^2 = \max(\bar r_{t-1}^2, \|x_t - x_0\|^2), \quad
      v_t = v_{t-1} + \bar r_t^2 \|g_t\|^2, \quad
      x_{t+1} = x_t - \frac{\bar r_t^2}{\sqrt{v_t} + \epsilon}\, g_t.

    Args:
      learning_rate: multiplies DoWG's step (a number or a schedule).
      init_estim_sq_dist: initial guess of the squared distance to the solution
        (``None``: ``eps``).
      eps: added to the denominator of the step size.
      weight_decay: strength of the L2 penalty added to the gradients (``None``: none).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Khaled et al., `DoWG Unleashed: An Efficient Universal Parameter-Free Gradient Descent
      Method <https://arxiv.org/abs/2305.16284>`_, 2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.dowg()
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.9866, -1.9731])
    """
    return _combining.chain(
        _weight_decay_step(weight_decay, mask),
        scale_by_dowg(init_estim_sq_dist, eps),
        transform.scale_by_learning_rate(learning_rate),
    )
