"""The whole in-place step of SGD with momentum, as ``torch.optim.SGD`` takes it.

Optax's ``sgd(learning_rate, momentum)`` is ``chain(trace(momentum), scale(-learning_rate))``:
the trace ``g + momentum * t`` becomes the update, scaled and added to the parameters. Its
whole step (:func:`optax_compat.inplace_step`) writes the new trace into its buffer and adds it,
scaled, to the parameters: three passes over memory and no new tensor, where the pure update
allocates the trace and the update. Where PyTorch's fused SGD kernel takes the step
(:func:`~optax_compat._runtime.torch_kernels.takes`), it is one pass: ``torch._fused_sgd_``
forms the same trace, ``t * momentum + g``, and adds ``-lr`` times it (or Nesterov's
``g + momentum * t``) to the parameters. Its vector loop rounds as the three passes do (and as
Optax does eagerly); the few elements of a tensor after its last full vector it rounds once,
as Optax under ``jax.jit`` rounds them all (XLA contracts ``g + decay * t`` into a fused
multiply-add). It starts from the zero trace of Optax's ``init`` (never from its "first step"
copy of ``g``) and is given no weight decay or dampening: the step is Optax's.
"""

from __future__ import annotations

from typing import Any

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import torch_kernels
from optax_compat._runtime import tree_math as tm
from optax_compat._runtime.adam_engine import StepFn
from optax_compat._src import base


def sgd_step(tx: base.GradientTransformation, learning_rate: Any, momentum: Any,
             nesterov: bool) -> StepFn:
    """The whole step of ``tx = sgd(learning_rate, momentum, nesterov)`` (a constant learning
    rate); gradients whose dtype differs from the trace's go through ``tx.update``."""

    def step(params: base.Params, grads: base.Updates, state: base.OptState, *,
             keep_grads: bool = False) -> base.OptState:
        del keep_grads  # the gradients are only read
        leaves, spec = tm.flatten(params)
        gs = tm.leaves_like(grads, spec, "grads", reference=params)
        traces = tm.leaves_like(state[0].trace, spec, "state.trace", reference=params)
        with torch.no_grad():
            if not (tm.same_dtypes(gs, traces) and tm.same_dtypes(traces, leaves)):
                updates, new_state = tx.update(grads, state, params)
                tm.add_(leaves, tm.leaves_like(updates, spec, "updates", reference=params))
                return new_state
            if _kernel_takes(leaves, gs, traces, learning_rate, momentum):
                torch._fused_sgd_(leaves, gs, traces, weight_decay=0.0, momentum=momentum,
                                  lr=learning_rate, dampening=0.0, nesterov=nesterov,
                                  maximize=False, is_first_step=False)
                return state
            tm.add_(tm.mul_(traces, momentum), gs)  # g + momentum * t, with Optax's roundings
            updates = tm.add_scaled(gs, momentum, traces) if nesterov else traces
            tm.add_scaled_(leaves, -learning_rate, updates)
        return state

    return step


def on_the_kernel(learning_rate: Any, momentum: Any) -> bool:
    """Whether steps with these hyper-parameters run on ``torch._fused_sgd_`` wherever its
    leaves fit (:func:`~optax_compat._runtime.torch_kernels.takes`): numbers, and a momentum
    other than zero, at which the kernel keeps no trace where Optax's holds the last
    gradient."""
    return bb.is_number(learning_rate) and bb.is_number(momentum) and not bb.is_zero(momentum)


def _kernel_takes(leaves: tm.Leaves, gs: tm.Leaves, traces: tm.Leaves, learning_rate: Any,
                  momentum: Any) -> bool:
    """Whether ``torch._fused_sgd_`` takes this step (leaves, grads and traces that have the
    same dtypes, leaf by leaf)."""
    return (bool(leaves) and on_the_kernel(learning_rate, momentum)
            and len(set(tm.attributes("dtype", gs))) == 1
            and not tm.is_batched(gs) and tm.same_shapes(gs, traces)
            and tm.same_shapes(gs, leaves) and torch_kernels.takes(gs, (gs, traces, leaves)))
