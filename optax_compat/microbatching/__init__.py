"""Microbatching: evaluate functions one batch slice at a time (``optax.microbatching``)."""

from optax_compat.microbatching._microbatching import (
    AccumulationType,
    Accumulator,
    micro_grad,
    micro_vmap,
    microbatch,
    reshape_batch_axis,
)

__all__ = [
    "AccumulationType",
    "Accumulator",
    "micro_grad",
    "micro_vmap",
    "microbatch",
    "reshape_batch_axis",
]
