"""Gradient transformations (mirrors ``optax.transforms``)."""

from optax_compat.transforms._accumulation import (
    MultiSteps,
    MultiStepsState,
    ShouldSkipUpdateFunction,
    skip_large_updates,
    skip_not_finite,
)
from optax_compat.transforms._combining import PartitionState, chain, named_chain, partition
from optax_compat.transforms._conditionality import (
    ApplyIfFiniteState,
    ConditionallyMaskState,
    ConditionallyTransformState,
    ConditionFn,
    apply_if_finite,
    conditionally_mask,
    conditionally_transform,
)
from optax_compat.transforms._freezing import freeze, selective_transform
from optax_compat.transforms._layouts import flatten
from optax_compat.transforms._masking import MaskedNode, MaskedState, masked
