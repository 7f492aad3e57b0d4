"""Gradient transformations (mirrors ``optax.transforms``)."""

from optax_compat.transforms._combining import PartitionState, chain, named_chain, partition
from optax_compat.transforms._masking import MaskedNode, MaskedState, masked
