"""Composition of transformations, where Optax 0.2.8 keeps it (``optax/_src/combine.py``)."""

from optax_compat.transforms._combining import (
    MultiTransformState,
    chain,
    multi_transform,
    named_chain,
    partition,
)

__all__ = ("MultiTransformState", "chain", "multi_transform", "named_chain", "partition")
