"""Optax's public API on PyTorch and optree: ``import optax_compat as optax``.

Names, module paths, signatures and NamedTuple states follow Optax 0.2.8; the arithmetic runs
on ``torch._foreach_*`` kernels over optree-flattened leaves.
"""

__version__ = "0.1.0"

from optax_compat import porting, schedules, tree, tree_utils
from optax_compat._runtime.config import config

# Transforms and aliases ----------------------------------------------------------------------
from optax_compat._src.base import (
    AdaptiveGradClipState,
    AddDecayedWeightsState,
    ClipByGlobalNormState,
    ClipState,
    EmptyState,
    GradientTransformation,
    GradientTransformationExtraArgs,
    OptState,
    Params,
    ScalarOrSchedule,
    ScaleByTrustRatioState,
    ScaleState,
    Schedule,
    TransformInitFn,
    TransformUpdateExtraArgsFn,
    TransformUpdateFn,
    Updates,
    identity,
    init_empty_state,
    set_to_zero,
    stateless,
    stateless_with_tree_map,
    with_extra_args_support,
)
from optax_compat._src.factorized import FactoredState, scale_by_factored_rms
from optax_compat._src.linear_algebra import (
    global_norm,
    matrix_inverse_pth_root,
    nnls,
    power_iteration,
)
from optax_compat._src.numerics import (
    safe_increment,
    safe_int32_increment,
    safe_norm,
    safe_root_mean_squares,
)
from optax_compat._src.transform import (
    ApplyEvery,
    ScaleByAdaDeltaState,
    ScaleByAdamState,
    ScaleByAdanState,
    ScaleByAmsgradState,
    ScaleByBeliefState,
    ScaleByLionState,
    ScaleByNovogradState,
    ScaleByRmsState,
    ScaleByRpropState,
    ScaleByRssState,
    ScaleByRStdDevState,
    ScaleByScheduleState,
    ScaleBySM3State,
    apply_every,
    centralize,
    normalize_by_update_norm,
    scale,
    scale_by_adadelta,
    scale_by_adam,
    scale_by_adamax,
    scale_by_adan,
    scale_by_amsgrad,
    scale_by_belief,
    scale_by_distance_over_gradients,
    scale_by_learning_rate,
    scale_by_lion,
    scale_by_novograd,
    scale_by_optimistic_gradient,
    scale_by_param_block_norm,
    scale_by_param_block_rms,
    scale_by_polyak,
    scale_by_radam,
    scale_by_rms,
    scale_by_rprop,
    scale_by_rss,
    scale_by_schedule,
    scale_by_sign,
    scale_by_sm3,
    scale_by_stddev,
    scale_by_trust_ratio,
    scale_by_yogi,
)
from optax_compat._src.update import apply_updates, incremental_update, periodic_update
from optax_compat._src.utils import multi_normal, scale_gradient
from optax_compat.schedules import (
    constant_schedule,
    cosine_decay_schedule,
    cosine_onecycle_schedule,
    exponential_decay,
    join_schedules,
    linear_onecycle_schedule,
    linear_schedule,
    piecewise_constant_schedule,
    piecewise_interpolate_schedule,
    polynomial_schedule,
    sgdr_schedule,
    warmup_constant_schedule,
    warmup_cosine_decay_schedule,
    warmup_exponential_decay_schedule,
)
from optax_compat.transforms import (
    AddNoiseState,
    EmaState,
    NonNegativeParamsState,
    TraceState,
    ZeroNansState,
    adaptive_grad_clip,
    add_decayed_weights,
    add_noise,
    clip,
    clip_by_block_rms,
    clip_by_global_norm,
    ema,
    keep_params_nonnegative,
    per_example_global_norm_clip,
    per_example_layer_norm_clip,
    trace,
    zero_nans,
)
from optax_compat.tree_utils import (
    tree_map_params,
)
from optax_compat.tree_utils._tree_math import (
    tree_bias_correction as bias_correction,
)
from optax_compat.tree_utils._tree_math import (
    tree_update_infinity_moment as update_infinity_moment,
)
from optax_compat.tree_utils._tree_math import (
    tree_update_moment as update_moment,
)
from optax_compat.tree_utils._tree_math import (
    tree_update_moment_per_elem_norm as update_moment_per_elem_norm,
)

# isort: split
from optax_compat._src.alias import (
    MaskOrFn,
    adabelief,
    adadelta,
    adafactor,
    adagrad,
    adam,
    adamax,
    adamaxw,
    adamw,
    adan,
    amsgrad,
    fromage,
    lamb,
    lars,
    lion,
    nadam,
    nadamw,
    noisy_sgd,
    novograd,
    optimistic_adam,
    optimistic_adam_v2,
    optimistic_gradient_descent,
    polyak_sgd,
    radam,
    rmsprop,
    rprop,
    sgd,
    sign_sgd,
    signum,
    sm3,
    yogi,
)

# Combinators and wrappers ---------------------------------------------------------------------
# isort: split
from optax_compat._src.lookahead import LookaheadParams, LookaheadState, lookahead
from optax_compat.schedules._inject import (
    InjectHyperparamsState,
    InjectStatefulHyperparamsState,
    WrappedSchedule,
    inject_hyperparams,
    inject_stateful_hyperparams,
)
from optax_compat.transforms._accumulation import (
    MultiSteps,
    MultiStepsState,
    ShouldSkipUpdateFunction,
    skip_large_updates,
    skip_not_finite,
)
from optax_compat.transforms._combining import (
    MultiTransformState,
    PartitionState,
    chain,
    multi_transform,
    named_chain,
    partition,
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

# Submodules beyond the optimizer core ----------------------------------------------------------
# isort: split
from optax_compat import (
    assignment,
    contrib,
    experimental,
    losses,
    microbatching,
    perturbations,
    projections,
    second_order,
)
from optax_compat.losses import (
    convex_kl_divergence,
    cosine_distance,
    cosine_similarity,
    ctc_loss,
    ctc_loss_with_forward_probs,
    generalized_kl_divergence,
    hinge_loss,
    huber_loss,
    kl_divergence,
    l2_loss,
    log_cosh,
    ntxent,
    safe_softmax_cross_entropy,
    sigmoid_binary_cross_entropy,
    sigmoid_focal_loss,
    smooth_labels,
    softmax_cross_entropy,
    softmax_cross_entropy_with_integer_labels,
    squared_error,
)
from optax_compat.microbatching import microbatch

# Beyond Optax: any elementwise transformation as one compiled pass over flat buffers, the
# declarations that let your own transformations take that path, and states in fewer bits.
# isort: split
from optax_compat import capabilities, memory
from optax_compat._runtime.fused import FusedStep, fused_step

# Line searches and L-BFGS ------------------------------------------------------------------------
# isort: split
# Beyond Optax: the whole in-place step of a transformation that has one (adam, adamw).
from optax_compat._runtime.adam_engine import inplace_step
from optax_compat._src.alias import lbfgs
from optax_compat._src.linesearch import (
    ScaleByBacktrackingLinesearchState,
    ScaleByZoomLinesearchState,
    ZoomLinesearchInfo,
    scale_by_backtracking_linesearch,
    scale_by_zoom_linesearch,
    value_and_grad_from_state,
)
from optax_compat._src.transform import ScaleByLBFGSState, scale_by_lbfgs

# Testing helpers are imported on demand: ``optax_compat.testing``.

# PyTorch's training stack: any transformation as a torch.optim.Optimizer, and checkpoints ------
# isort: split
from optax_compat import checkpoint
from optax_compat._runtime.torch_optimizer import TorchOptimizer, torch_optimizer

# Names Optax 0.2.8 still resolves with a DeprecationWarning -----------------------------------
# isort: split
from optax_compat._src.deprecations import deprecation_getattr as _deprecation_getattr

_deprecations = {
    "differentially_private_aggregate": (
        "optax.differentially_private_aggregate is deprecated: use"
        " optax.contrib.differentially_private_aggregate (optax v0.1.8 or newer).",
        contrib.differentially_private_aggregate),
    "DifferentiallyPrivateAggregateState": (
        "optax.DifferentiallyPrivateAggregateState is deprecated: use"
        " optax.contrib.DifferentiallyPrivateAggregateState (optax v0.1.8 or newer).",
        contrib.DifferentiallyPrivateAggregateState),
    "dpsgd": (
        "optax.dpsgd is deprecated: use optax.contrib.dpsgd (optax v0.1.8 or newer).",
        contrib.dpsgd),
    "monte_carlo": ("optax.monte_carlo is deprecated. (optax v0.2.7 or newer).", None),
}
__getattr__ = _deprecation_getattr(__name__, _deprecations)
del _deprecation_getattr
