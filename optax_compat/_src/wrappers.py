"""Transformation wrappers, where Optax 0.2.8 keeps them (``optax/_src/wrappers.py``)."""

from optax_compat.transforms._accumulation import (
    MultiSteps,
    MultiStepsState,
    ShouldSkipUpdateFunction,
    skip_large_updates,
    skip_not_finite,
)
from optax_compat.transforms._conditionality import (
    ApplyIfFiniteState,
    ConditionallyMaskState,
    ConditionallyTransformState,
    ConditionFn,
    apply_if_finite,
    conditionally_mask,
    conditionally_transform,
)
from optax_compat.transforms._layouts import flatten
from optax_compat.transforms._masking import MaskedNode, MaskedState, masked

__all__ = (
    "ApplyIfFiniteState",
    "ConditionFn",
    "ConditionallyMaskState",
    "ConditionallyTransformState",
    "MaskedNode",
    "MaskedState",
    "MultiSteps",
    "MultiStepsState",
    "ShouldSkipUpdateFunction",
    "apply_if_finite",
    "conditionally_mask",
    "conditionally_transform",
    "flatten",
    "masked",
    "skip_large_updates",
    "skip_not_finite",
)
