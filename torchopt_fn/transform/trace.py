"""Momentum (``optax_compat``'s ``trace``), with PyTorch's dampening.

Without dampening, TorchOpt's trace is Optax's: ``t = momentum * t + g``. With dampening,
PyTorch starts the buffer at the first gradient and then adds ``(1 - dampening) * g``; that
variant needs to know the first step and is written here on the foreach layer.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

import optax_compat
from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from torchopt_fn.base import GradientTransformation, identity
from torchopt_fn.transform.utils import from_optax, with_moment_requires_grad
from torchopt_fn.typing import OptState, Params, Updates

__all__ = ["trace"]


class DampenedTraceState(NamedTuple):
    """The momentum buffer and the number of past updates (an ``int32`` 0-d tensor)."""

    trace: Params
    count: torch.Tensor


def _dampened_trace(momentum: float, dampening: float) -> GradientTransformation:
    """PyTorch's SGD momentum with dampening: the first step copies the gradient."""

    def init_fn(params: Params) -> OptState:
        return DampenedTraceState(trace=bb.zeros(params), count=bb.zero_count(params))

    @bb.elementwise
    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        del params
        grads, spec = tree_math.flatten(updates)
        buffers = tree_math.leaves_like(state.trace, spec, "state.trace", updates)
        dampened = tree_math.add_scaled(tree_math.mul(buffers, momentum), 1.0 - dampening, grads)
        new_trace = tree_math.where(state.count == 0, grads, dampened)
        new_state = DampenedTraceState(trace=tree_math.unflatten(spec, new_trace),
                                       count=optax_compat.safe_increment(state.count))
        if inplace and grads:
            # The next transformations may write into the updates: they must not be the trace.
            tree_math.copy_(grads, new_trace)
            return updates, new_state
        return tree_math.unflatten(spec, new_trace), new_state

    return GradientTransformation(init_fn, update_fn)


def trace(momentum: float = 0.9, dampening: float = 0.0, nesterov: bool = False,
          moment_requires_grad: bool = False) -> GradientTransformation:
    """Accumulates a momentum trace of past updates.

    References:
      Sutskever et al., 2013: http://proceedings.mlr.press/v28/sutskever13.pdf

    Args:
      momentum: decay rate of the trace; ``0.0`` gives the identity (no state).
      dampening: PyTorch's dampening of the incoming update (after the first step).
      nesterov: use Nesterov momentum (``g + momentum * t``).
      moment_requires_grad: create the trace as an autograd leaf that requires grad.

    Returns:
      A :class:`GradientTransformation`.
    """
    if not momentum >= 0.0:
        raise ValueError(f"Invalid momentum value: {momentum}")
    if nesterov and (momentum <= 0.0 or dampening != 0.0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening")
    if momentum == 0.0:
        return identity()
    if dampening == 0.0:
        tx = from_optax(optax_compat.trace(decay=momentum, nesterov=nesterov))
    else:
        tx = _dampened_trace(momentum, dampening)
    return with_moment_requires_grad(tx, moment_requires_grad)
