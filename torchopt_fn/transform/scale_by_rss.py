"""AdaGrad's rescaling with PyTorch's epsilon placement: ``g / (sqrt(sum g^2) + eps)``.

Optax's ``scale_by_rss`` uses ``rsqrt(sum + eps)``; TorchOpt follows ``torch.optim.Adagrad``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import moment_leaves
from torchopt_fn.typing import OptState, Params, Updates

__all__ = ["scale_by_rss"]


class ScaleByRssState(NamedTuple):
    """The running sum of the squared updates."""

    sum_of_squares: Updates


def scale_by_rss(initial_accumulator_value: float = 0.1,
                 eps: float = 1e-7) -> GradientTransformation:
    """Divides updates by the root of the sum of all past squared updates, plus ``eps``.

    Leaves whose sum of squares is still zero get a zero update.

    References:
      Duchi et al., 2011: https://jmlr.org/papers/v12/duchi11a.html

    Args:
      initial_accumulator_value: the initial value of the sum.
      eps: added to the root (outside the square root, as PyTorch does).

    Returns:
      A :class:`GradientTransformation` with a :class:`ScaleByRssState`.
    """
    if not initial_accumulator_value >= 0.0:
        raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
    if not eps >= 0.0:
        raise ValueError(f"Invalid epsilon value: {eps}")

    def init_fn(params: Params) -> OptState:
        return ScaleByRssState(sum_of_squares=bb.full(params, initial_accumulator_value))

    @bb.elementwise
    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        del params
        grads, spec = tree_math.flatten(updates)
        sums = tree_math.leaves_like(state.sum_of_squares, spec, "state.sum_of_squares", updates)
        sums = moment_leaves(grads, sums, 1.0, order=2, inplace=inplace)
        scaled = tree_math.div(grads, tree_math.add(tree_math.sqrt(sums), eps))
        new_updates = [torch.where(total > 0.0, u, torch.zeros_like(u))
                       for total, u in zip(sums, scaled, strict=True)]
        return tree_math.unflatten(spec, new_updates), ScaleByRssState(
            sum_of_squares=tree_math.unflatten(spec, sums))

    return GradientTransformation(init_fn, update_fn)
