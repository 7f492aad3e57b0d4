"""RMSProp's rescaling with PyTorch's epsilon placement: ``g / (sqrt(nu) + eps)``.

Optax's ``scale_by_rms`` divides by ``sqrt(nu + eps)``; TorchOpt follows ``torch.optim.RMSprop``,
so this transformation is TorchOpt's own, written on the foreach layer.
"""

from __future__ import annotations

from typing import NamedTuple

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import divide_updates, moment_leaves
from torchopt_fn.typing import OptState, Params, Updates

__all__ = ["scale_by_rms"]


class ScaleByRmsState(NamedTuple):
    """The moving average of the squared updates."""

    nu: Updates


def check_rms_arguments(alpha: float, eps: float) -> None:
    """Raises ``ValueError`` for a negative smoothing constant or epsilon."""
    if not alpha >= 0.0:
        raise ValueError(f"Invalid alpha value: {alpha}")
    if not eps >= 0.0:
        raise ValueError(f"Invalid epsilon value: {eps}")


def scale_by_rms(alpha: float = 0.9, eps: float = 1e-8,
                 initial_scale: float = 0.0) -> GradientTransformation:
    """Divides updates by the root of the moving average of their squares, plus ``eps``.

    References:
      Tieleman and Hinton, 2012: http://www.cs.toronto.edu/~hinton/coursera/lecture6/lec6.pdf

    Args:
      alpha: decay rate of the moving average of the squared updates.
      eps: added to the root (outside the square root, as PyTorch does).
      initial_scale: the initial value of the moving average.

    Returns:
      A :class:`GradientTransformation` with a :class:`ScaleByRmsState`.
    """
    check_rms_arguments(alpha, eps)

    def init_fn(params: Params) -> OptState:
        return ScaleByRmsState(nu=bb.full(params, initial_scale))

    @bb.elementwise
    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        del params
        grads, spec = tree_math.flatten(updates)
        nu = tree_math.leaves_like(state.nu, spec, "state.nu", updates)
        nu = moment_leaves(grads, nu, alpha, order=2, inplace=inplace)
        new_updates = divide_updates(grads, tree_math.add(tree_math.sqrt(nu), eps),
                                     inplace=inplace)
        return tree_math.unflatten(spec, new_updates), ScaleByRmsState(
            nu=tree_math.unflatten(spec, nu))

    return GradientTransformation(init_fn, update_fn)
