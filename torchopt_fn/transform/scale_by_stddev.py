"""Centered RMSProp's rescaling with PyTorch's epsilon placement: ``g / (sqrt(nu - mu^2) + eps)``.

Optax puts ``eps`` inside the square root; TorchOpt follows ``torch.optim.RMSprop(centered=True)``.
"""

from __future__ import annotations

from typing import NamedTuple

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.scale_by_rms import check_rms_arguments
from torchopt_fn.transform.utils import divide_updates, moment_leaves
from torchopt_fn.typing import OptState, Params, Updates

__all__ = ["scale_by_stddev"]


class ScaleByRStdDevState(NamedTuple):
    """The moving averages of the updates and of their squares."""

    mu: Updates
    nu: Updates


def scale_by_stddev(alpha: float = 0.9, eps: float = 1e-8,
                    initial_scale: float = 0.0) -> GradientTransformation:
    """Divides updates by their running standard deviation, plus ``eps``.

    References:
      Graves, 2013: https://arxiv.org/abs/1308.0850

    Args:
      alpha: decay rate of both moving averages.
      eps: added to the standard deviation (outside the square root, as PyTorch does).
      initial_scale: the initial value of the moving average of the squares.

    Returns:
      A :class:`GradientTransformation` with a :class:`ScaleByRStdDevState`.
    """
    check_rms_arguments(alpha, eps)

    def init_fn(params: Params) -> OptState:
        return ScaleByRStdDevState(mu=bb.zeros(params), nu=bb.full(params, initial_scale))

    @bb.elementwise
    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        del params
        grads, spec = tree_math.flatten(updates)
        mu = tree_math.leaves_like(state.mu, spec, "state.mu", updates)
        nu = tree_math.leaves_like(state.nu, spec, "state.nu", updates)
        mu = moment_leaves(grads, mu, alpha, order=1, inplace=inplace)
        nu = moment_leaves(grads, nu, alpha, order=2, inplace=inplace)
        variance = tree_math.sub(nu, tree_math.square(mu))
        new_updates = divide_updates(grads, tree_math.add(tree_math.sqrt(variance), eps),
                                     inplace=inplace)
        return tree_math.unflatten(spec, new_updates), ScaleByRStdDevState(
            mu=tree_math.unflatten(spec, mu), nu=tree_math.unflatten(spec, nu))

    return GradientTransformation(init_fn, update_fn)
