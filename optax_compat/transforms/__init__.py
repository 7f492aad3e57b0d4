"""Gradient transformations (mirrors ``optax.transforms``)."""

# Transforms
from optax_compat.transforms._accumulation import EmaState, TraceState, ema, trace
from optax_compat.transforms._adding import AddNoiseState, add_decayed_weights, add_noise
from optax_compat.transforms._clipping import (
    adaptive_grad_clip,
    clip,
    clip_by_block_rms,
    clip_by_global_norm,
    per_example_global_norm_clip,
    per_example_layer_norm_clip,
    unitwise_clip,
    unitwise_norm,
)
from optax_compat.transforms._constraining import (
    NonNegativeParamsState,
    ZeroNansState,
    keep_params_nonnegative,
    zero_nans,
)

# Combinators and wrappers
# isort: split
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
from optax_compat.transforms._monitoring import (
    MonitorState,
    SnapshotState,
    measure_with_ema,
    monitor,
    snapshot,
)
