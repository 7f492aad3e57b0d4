"""The whole in-place step of SGD with momentum, as ``torch.optim.SGD`` takes it.

Optax's ``sgd(learning_rate, momentum)`` is ``chain(trace(momentum), scale(-learning_rate))``:
the trace ``g + momentum * t`` becomes the update, scaled and added to the parameters. Its
whole step (:func:`optax_compat.inplace_step`) writes the new trace into its buffer and adds it,
scaled, to the parameters: three passes over memory and no new tensor, where the pure update
allocates the trace and the update.
"""

from __future__ import annotations

from typing import Any

import torch

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
            tm.add_(tm.mul_(traces, momentum), gs)  # g + momentum * t, with Optax's roundings
            updates = tm.add_scaled(gs, momentum, traces) if nesterov else traces
            tm.add_scaled_(leaves, -learning_rate, updates)
        return state

    return step
