"""Where the API reference documents each public name (read by ``docs/_ext/apiref.py``).

``PAGES`` holds one entry per topic page: ``(slug, title, intro, sections)``, each section a
``(heading, [dotted names])`` pair, grouped as Optax's and TorchOpt's own API references group
theirs. A public name missing here is a build warning unless its object is documented under
another path here (then its namespace page points to that entry). ``NAMESPACES`` lists every
public module; each gets a page listing all its names.
"""

INTRO = """
Every public name of :mod:`optax_compat` and :mod:`torchopt_fn`, generated from the code.
The topic pages follow Optax's and TorchOpt's own grouping; the pages under *By module* list
every name of each module, including re-exports, and link each to its entry.
"""

NAMESPACES = [
    "optax_compat", "optax_compat.tree_utils", "optax_compat.tree", "optax_compat.schedules",
    "optax_compat.transforms", "optax_compat.losses", "optax_compat.contrib",
    "optax_compat.projections", "optax_compat.second_order", "optax_compat.perturbations",
    "optax_compat.assignment", "optax_compat.microbatching", "optax_compat.experimental",
    "optax_compat.experimental.aggregating", "optax_compat.testing", "optax_compat.checkpoint",
    "optax_compat.capabilities", "optax_compat.memory",
    "optax_compat.porting", "optax_compat.distributed",
    "torchopt_fn", "torchopt_fn.accelerated_op", "torchopt_fn.alias", "torchopt_fn.base",
    "torchopt_fn.clip", "torchopt_fn.combine", "torchopt_fn.diff", "torchopt_fn.diff.implicit",
    "torchopt_fn.diff.implicit.nn", "torchopt_fn.diff.zero_order",
    "torchopt_fn.diff.zero_order.nn", "torchopt_fn.distributed", "torchopt_fn.hook",
    "torchopt_fn.linalg", "torchopt_fn.linear_solve", "torchopt_fn.nn", "torchopt_fn.optim",
    "torchopt_fn.optim.func", "torchopt_fn.optim.meta", "torchopt_fn.pytree",
    "torchopt_fn.schedule", "torchopt_fn.transform", "torchopt_fn.typing", "torchopt_fn.update",
    "torchopt_fn.utils", "torchopt_fn.visual",
]

PAGES = [
    ("optax_compat/optimizers", "Optimizers", "", [
        ("AdaBelief", [
            "optax_compat.adabelief",
        ]),
        ("AdaDelta", [
            "optax_compat.adadelta",
        ]),
        ("AdaFactor", [
            "optax_compat.adafactor",
        ]),
        ("AdaGrad", [
            "optax_compat.adagrad",
        ]),
        ("Adam", [
            "optax_compat.adam",
        ]),
        ("Adamax", [
            "optax_compat.adamax",
        ]),
        ("AdamaxW", [
            "optax_compat.adamaxw",
        ]),
        ("AdamW", [
            "optax_compat.adamw",
        ]),
        ("Adan", [
            "optax_compat.adan",
        ]),
        ("AMSGrad", [
            "optax_compat.amsgrad",
        ]),
        ("Fromage", [
            "optax_compat.fromage",
        ]),
        ("Lamb", [
            "optax_compat.lamb",
        ]),
        ("Lars", [
            "optax_compat.lars",
        ]),
        ("LBFGS", [
            "optax_compat.lbfgs",
        ]),
        ("Lion", [
            "optax_compat.lion",
        ]),
        ("Nadam", [
            "optax_compat.nadam",
        ]),
        ("NadamW", [
            "optax_compat.nadamw",
        ]),
        ("Noisy SGD", [
            "optax_compat.noisy_sgd",
        ]),
        ("Novograd", [
            "optax_compat.novograd",
        ]),
        ("Optimistic Adam", [
            "optax_compat.optimistic_adam_v2", "optax_compat.optimistic_adam",
        ]),
        ("Optimistic GD", [
            "optax_compat.optimistic_gradient_descent",
        ]),
        ("Polyak step-size SGD", [
            "optax_compat.polyak_sgd",
        ]),
        ("RAdam", [
            "optax_compat.radam",
        ]),
        ("RMSProp", [
            "optax_compat.rmsprop",
        ]),
        ("RProp", [
            "optax_compat.rprop",
        ]),
        ("SGD", [
            "optax_compat.sgd",
        ]),
        ("SignSGD", [
            "optax_compat.sign_sgd",
        ]),
        ("Signum", [
            "optax_compat.signum",
        ]),
        ("SM3", [
            "optax_compat.sm3",
        ]),
        ("Yogi", [
            "optax_compat.yogi",
        ]),
    ]),
    ("optax_compat/transformations", "Transformations", "", [
        ("Transformations", [
            "optax_compat.adaptive_grad_clip", "optax_compat.add_decayed_weights",
            "optax_compat.add_noise", "optax_compat.apply_every", "optax_compat.bias_correction",
            "optax_compat.centralize", "optax_compat.clip", "optax_compat.clip_by_block_rms",
            "optax_compat.clip_by_global_norm", "optax_compat.conditionally_mask",
            "optax_compat.conditionally_transform", "optax_compat.ema", "optax_compat.global_norm",
            "optax_compat.identity", "optax_compat.init_empty_state",
            "optax_compat.keep_params_nonnegative", "optax_compat.masked",
            "optax_compat.measure_with_ema", "optax_compat.monitor",
            "optax_compat.normalize_by_update_norm", "optax_compat.per_example_global_norm_clip",
            "optax_compat.per_example_layer_norm_clip", "optax_compat.scale",
            "optax_compat.scale_by_adadelta", "optax_compat.scale_by_adam",
            "optax_compat.scale_by_adamax", "optax_compat.scale_by_adan",
            "optax_compat.scale_by_amsgrad", "optax_compat.scale_by_backtracking_linesearch",
            "optax_compat.scale_by_belief", "optax_compat.scale_by_factored_rms",
            "optax_compat.scale_by_lbfgs", "optax_compat.scale_by_learning_rate",
            "optax_compat.scale_by_lion", "optax_compat.scale_by_novograd",
            "optax_compat.scale_by_optimistic_gradient", "optax_compat.scale_by_param_block_norm",
            "optax_compat.scale_by_param_block_rms", "optax_compat.scale_by_polyak",
            "optax_compat.scale_by_radam", "optax_compat.scale_by_rms",
            "optax_compat.scale_by_rprop", "optax_compat.scale_by_rss",
            "optax_compat.scale_by_schedule", "optax_compat.scale_by_sign",
            "optax_compat.scale_by_sm3", "optax_compat.scale_by_stddev",
            "optax_compat.scale_by_trust_ratio", "optax_compat.scale_by_yogi",
            "optax_compat.scale_by_zoom_linesearch", "optax_compat.set_to_zero",
            "optax_compat.snapshot", "optax_compat.stateless",
            "optax_compat.stateless_with_tree_map", "optax_compat.trace",
            "optax_compat.update_infinity_moment", "optax_compat.update_moment",
            "optax_compat.update_moment_per_elem_norm", "optax_compat.with_extra_args_support",
            "optax_compat.zero_nans", "optax_compat.scale_by_distance_over_gradients",
        ]),
        ("States", [
            "optax_compat.AdaptiveGradClipState", "optax_compat.AddDecayedWeightsState",
            "optax_compat.AddNoiseState", "optax_compat.ApplyEvery",
            "optax_compat.ClipByGlobalNormState", "optax_compat.ClipState",
            "optax_compat.ConditionallyMaskState", "optax_compat.ConditionallyTransformState",
            "optax_compat.EmaState", "optax_compat.EmptyState", "optax_compat.FactoredState",
            "optax_compat.MonitorState", "optax_compat.NonNegativeParamsState",
            "optax_compat.ScaleByAdaDeltaState", "optax_compat.ScaleByAdamState",
            "optax_compat.ScaleByAdanState", "optax_compat.ScaleByAmsgradState",
            "optax_compat.ScaleByBacktrackingLinesearchState", "optax_compat.ScaleByBeliefState",
            "optax_compat.ScaleByLBFGSState", "optax_compat.ScaleByLionState",
            "optax_compat.ScaleByNovogradState", "optax_compat.ScaleByRmsState",
            "optax_compat.ScaleByRpropState", "optax_compat.ScaleByRssState",
            "optax_compat.ScaleByRStdDevState", "optax_compat.ScaleByScheduleState",
            "optax_compat.ScaleBySM3State", "optax_compat.ScaleByTrustRatioState",
            "optax_compat.ScaleByZoomLinesearchState", "optax_compat.ScaleState",
            "optax_compat.SnapshotState", "optax_compat.TraceState", "optax_compat.ZeroNansState",
            "optax_compat.ZoomLinesearchInfo",
        ]),
        ("Freezing", [
            "optax_compat.freeze", "optax_compat.selective_transform",
        ]),
        ("Types", [
            "optax_compat.GradientTransformation", "optax_compat.GradientTransformationExtraArgs",
            "optax_compat.OptState", "optax_compat.Params", "optax_compat.TransformInitFn",
            "optax_compat.TransformUpdateExtraArgsFn", "optax_compat.TransformUpdateFn",
            "optax_compat.Updates", "optax_compat.MaskedNode", "optax_compat.MaskOrFn",
            "optax_compat.ScalarOrSchedule", "optax_compat.transforms.ConditionFn",
        ]),
    ]),
    ("optax_compat/combining_optimizers", "Combining optimizers", "", [
        ("Chain", [
            "optax_compat.chain", "optax_compat.named_chain",
        ]),
        ("Partition", [
            "optax_compat.partition", "optax_compat.PartitionState",
        ]),
    ]),
    ("optax_compat/optimizer_wrappers", "Optimizer wrappers", "", [
        ("Apply if finite", [
            "optax_compat.apply_if_finite", "optax_compat.ApplyIfFiniteState",
        ]),
        ("Flatten", [
            "optax_compat.flatten",
        ]),
        ("Lookahead", [
            "optax_compat.lookahead", "optax_compat.LookaheadParams",
            "optax_compat.LookaheadState",
        ]),
        ("Masked update", [
            "optax_compat.MaskedState",
        ]),
        ("Multi-step update", [
            "optax_compat.MultiSteps", "optax_compat.MultiStepsState",
            "optax_compat.ShouldSkipUpdateFunction", "optax_compat.skip_large_updates",
            "optax_compat.skip_not_finite",
        ]),
    ]),
    ("optax_compat/optimizer_schedules", "Optimizer schedules", "", [
        ("Reduce on plateau", [
            "optax_compat.contrib.reduce_on_plateau", "optax_compat.contrib.ReduceLROnPlateauState",
        ]),
        ("Constant schedule", [
            "optax_compat.schedules.constant_schedule",
            "optax_compat.schedules.warmup_constant_schedule",
        ]),
        ("Cosine decay schedule", [
            "optax_compat.schedules.cosine_decay_schedule",
            "optax_compat.schedules.cosine_onecycle_schedule",
            "optax_compat.schedules.warmup_cosine_decay_schedule",
        ]),
        ("Exponential decay schedule", [
            "optax_compat.schedules.exponential_decay",
            "optax_compat.schedules.warmup_exponential_decay_schedule",
        ]),
        ("Inject hyperparameters", [
            "optax_compat.schedules.inject_hyperparams",
            "optax_compat.schedules.InjectHyperparamsState",
        ]),
        ("Join schedules", [
            "optax_compat.schedules.join_schedules",
        ]),
        ("Linear schedules", [
            "optax_compat.schedules.linear_onecycle_schedule",
            "optax_compat.schedules.linear_schedule",
        ]),
        ("Piecewise schedules", [
            "optax_compat.schedules.piecewise_constant_schedule",
            "optax_compat.schedules.piecewise_interpolate_schedule",
        ]),
        ("Polynomial schedules", [
            "optax_compat.schedules.polynomial_schedule",
        ]),
        ("Schedule type", [
            "optax_compat.schedules.Schedule",
        ]),
        ("Warm restarts", [
            "optax_compat.schedules.sgdr_schedule",
        ]),
        ("Stateful schedules", [
            "optax_compat.WrappedSchedule", "optax_compat.schedules.StatefulSchedule",
            "optax_compat.inject_stateful_hyperparams",
            "optax_compat.InjectStatefulHyperparamsState",
        ]),
    ]),
    ("optax_compat/pytorch", "PyTorch training stack", "", [
        ("Any transformation as a torch.optim.Optimizer", [
            "optax_compat.TorchOptimizer", "optax_compat.torch_optimizer",
        ]),
        ("The whole in-place step", ["optax_compat.inplace_step"]),
        ("Fused steps over packed buffers (elementwise and per-leaf chains, compiled)", [
            "optax_compat.fused_step", "optax_compat.FusedStep",
        ]),
        ("Declaring your own transformations for the fast paths (ours, not Optax's)", [
            "optax_compat.capabilities.elementwise", "optax_compat.capabilities.global_reduction",
            "optax_compat.capabilities.per_leaf", "optax_compat.capabilities.supports_inplace",
            "optax_compat.capabilities.like", "optax_compat.capabilities.why_not",
            "optax_compat.capabilities.capabilities_of", "optax_compat.capabilities.Capabilities",
            "optax_compat.capabilities.FLAT", "optax_compat.capabilities.STACKED",
            "optax_compat.capabilities.LAYOUTS",
        ]),
        ("Distributed checkpoints (flat, name-keyed states for torch.distributed.checkpoint)", [
            "optax_compat.distributed.state_to_flat_dict",
            "optax_compat.distributed.state_from_flat_dict",
        ]),
        ("Optimizer memory: quantized and low-precision states and parameters (ours)", [
            "optax_compat.memory.quantize_state", "optax_compat.memory.cast_state",
            "optax_compat.memory.kahan_summation", "optax_compat.memory.apply_updates",
            "optax_compat.memory.QuantizedState", "optax_compat.memory.CastState",
            "optax_compat.memory.Cast", "optax_compat.memory.KahanSummationState",
        ]),
        ("Checkpoints", [
            "optax_compat.checkpoint.save", "optax_compat.checkpoint.load",
            "optax_compat.checkpoint.state_to_dict", "optax_compat.checkpoint.state_from_dict",
            "optax_compat.checkpoint.STATE_TYPE_KEY",
        ]),
    ]),
    ("optax_compat/apply_updates", "Apply updates", "", [
        ("Apply updates", [
            "optax_compat.apply_updates",
        ]),
        ("Incremental update", [
            "optax_compat.incremental_update",
        ]),
        ("Periodic update", [
            "optax_compat.periodic_update",
        ]),
    ]),
    ("optax_compat/utilities", "Utilities", "", [
        ("Matrix inverse pth root", [
            "optax_compat.matrix_inverse_pth_root",
        ]),
        ("Non-negative least squares", [
            "optax_compat.nnls",
        ]),
        ("Power iteration", [
            "optax_compat.power_iteration",
        ]),
        ("Safe increment", [
            "optax_compat.safe_increment",
        ]),
        ("Safe norm", [
            "optax_compat.safe_norm",
        ]),
        ("Safe root mean squares", [
            "optax_compat.safe_root_mean_squares",
        ]),
        ("Scale gradient", [
            "optax_compat.scale_gradient",
        ]),
        ("Value and grad from state", [
            "optax_compat.value_and_grad_from_state",
        ]),
        ("Multivariate normal", [
            "optax_compat.multi_normal",
        ]),
        ("Unit-wise norms", [
            "optax_compat.transforms.unitwise_clip", "optax_compat.transforms.unitwise_norm",
        ]),
    ]),
    ("optax_compat/tree_utilities", "Tree utilities", "", [
        ("Tree utilities", [
            "optax_compat.tree_utils.NamedTupleKey", "optax_compat.tree_utils.tree_add",
            "optax_compat.tree_utils.tree_add_scale", "optax_compat.tree_utils.tree_allclose",
            "optax_compat.tree_utils.tree_batch_shape", "optax_compat.tree_utils.tree_cast",
            "optax_compat.tree_utils.tree_cast_like", "optax_compat.tree_utils.tree_clip",
            "optax_compat.tree_utils.tree_conj", "optax_compat.tree_utils.tree_div",
            "optax_compat.tree_utils.tree_dtype", "optax_compat.tree_utils.tree_full_like",
            "optax_compat.tree_utils.tree_get", "optax_compat.tree_utils.tree_get_all_with_path",
            "optax_compat.tree_utils.tree_map_params", "optax_compat.tree_utils.tree_max",
            "optax_compat.tree_utils.tree_min", "optax_compat.tree_utils.tree_mul",
            "optax_compat.tree_utils.tree_norm", "optax_compat.tree_utils.tree_ones_like",
            "optax_compat.tree_utils.tree_random_like", "optax_compat.tree_utils.tree_real",
            "optax_compat.tree_utils.tree_scale", "optax_compat.tree_utils.tree_set",
            "optax_compat.tree_utils.tree_size", "optax_compat.tree_utils.tree_split_key_like",
            "optax_compat.tree_utils.tree_sub", "optax_compat.tree_utils.tree_sum",
            "optax_compat.tree_utils.tree_vdot", "optax_compat.tree_utils.tree_where",
            "optax_compat.tree_utils.tree_zeros_like", "optax_compat.tree.unwrap_random_key_data",
        ]),
    ]),
    ("optax_compat/losses", "Losses", "", [
        ("Dice loss", [
            "optax_compat.losses.binary_dice_loss", "optax_compat.losses.dice_loss",
            "optax_compat.losses.multiclass_generalized_dice_loss",
        ]),
        ("Convex Kullback Leibler divergence", [
            "optax_compat.losses.convex_kl_divergence",
        ]),
        ("Cosine distance", [
            "optax_compat.losses.cosine_distance",
        ]),
        ("Cosine similarity", [
            "optax_compat.losses.cosine_similarity",
        ]),
        ("Connectionist temporal classification loss", [
            "optax_compat.losses.ctc_loss", "optax_compat.losses.ctc_loss_with_forward_probs",
        ]),
        ("Generalized Kullback-Leibler divergence", [
            "optax_compat.losses.generalized_kl_divergence",
        ]),
        ("Hinge loss", [
            "optax_compat.losses.hinge_loss", "optax_compat.losses.multiclass_hinge_loss",
        ]),
        ("Huber loss", [
            "optax_compat.losses.huber_loss",
        ]),
        ("Kullback-Leibler divergence", [
            "optax_compat.losses.kl_divergence",
            "optax_compat.losses.kl_divergence_with_log_targets",
        ]),
        ("L2 Squared loss", [
            "optax_compat.losses.l2_loss", "optax_compat.losses.squared_error",
        ]),
        ("Log hyperbolic cosine loss", [
            "optax_compat.losses.log_cosh",
        ]),
        ("Fenchel Young loss", [
            "optax_compat.losses.make_fenchel_young_loss",
        ]),
        ("Perceptron", [
            "optax_compat.losses.multiclass_perceptron_loss",
            "optax_compat.losses.perceptron_loss",
        ]),
        ("Sparsemax", [
            "optax_compat.losses.multiclass_sparsemax_loss", "optax_compat.losses.sparsemax_loss",
        ]),
        ("Normalized temperature scaled cross-entropy (NT-Xent) loss", [
            "optax_compat.losses.ntxent",
        ]),
        ("Poly loss cross-entropy", [
            "optax_compat.losses.poly_loss_cross_entropy",
        ]),
        ("Ranking softmax loss", [
            "optax_compat.losses.ranking_softmax_loss",
        ]),
        ("Soft-max cross-entropy", [
            "optax_compat.losses.safe_softmax_cross_entropy",
            "optax_compat.losses.softmax_cross_entropy",
            "optax_compat.losses.softmax_cross_entropy_with_integer_labels",
        ]),
        ("Sigmoid binary cross-entropy", [
            "optax_compat.losses.sigmoid_binary_cross_entropy",
        ]),
        ("Sigmoid focal loss", [
            "optax_compat.losses.sigmoid_focal_loss",
        ]),
        ("Smoothing labels", [
            "optax_compat.losses.smooth_labels",
        ]),
        ("Triplet margin loss", [
            "optax_compat.losses.triplet_margin_loss",
        ]),
    ]),
    ("optax_compat/projections", "Projections", "", [
        ("Projection onto a box", [
            "optax_compat.projections.projection_box",
        ]),
        ("Projection onto a halfspace", [
            "optax_compat.projections.projection_halfspace",
        ]),
        ("Projection onto a hypercube", [
            "optax_compat.projections.projection_hypercube",
        ]),
        ("Projection onto a hyperplane", [
            "optax_compat.projections.projection_hyperplane",
        ]),
        ("Projection onto the L1 ball", [
            "optax_compat.projections.projection_l1_ball",
        ]),
        ("Projection onto the L1 sphere", [
            "optax_compat.projections.projection_l1_sphere",
        ]),
        ("Projection onto the L2 ball", [
            "optax_compat.projections.projection_l2_ball",
        ]),
        ("Projection onto the L2 sphere", [
            "optax_compat.projections.projection_l2_sphere",
        ]),
        ("Projection onto the L-infinity ball", [
            "optax_compat.projections.projection_linf_ball",
        ]),
        ("Projection onto the non-negative orthant", [
            "optax_compat.projections.projection_non_negative",
        ]),
        ("Projection onto a simplex", [
            "optax_compat.projections.projection_simplex",
        ]),
        ("Projection onto a vector", [
            "optax_compat.projections.projection_vector",
        ]),
    ]),
    ("optax_compat/contrib", "Contrib", "", [
        ("Asynchronous-centering-Prop", [
            "optax_compat.contrib.acprop", "optax_compat.contrib.scale_by_acprop",
        ]),
        ("AdEMAMix", [
            "optax_compat.contrib.ademamix", "optax_compat.contrib.scale_by_ademamix",
            "optax_compat.contrib.ScaleByAdemamixState",
        ]),
        ("ADOPT", [
            "optax_compat.contrib.adopt", "optax_compat.contrib.scale_by_adopt",
        ]),
        ("Continuous coin betting", [
            "optax_compat.contrib.cocob", "optax_compat.contrib.scale_by_cocob",
            "optax_compat.contrib.COCOBState",
        ]),
        ("D-adaptation", [
            "optax_compat.contrib.dadapt_adamw", "optax_compat.contrib.DAdaptAdamWState",
        ]),
        ("Differentially Private Aggregate", [
            "optax_compat.contrib.differentially_private_aggregate",
            "optax_compat.contrib.DifferentiallyPrivateAggregateState",
            "optax_compat.contrib.dpsgd",
        ]),
        ("Distance over Gradients", [
            "optax_compat.contrib.dog", "optax_compat.contrib.DoGState",
            "optax_compat.contrib.dowg", "optax_compat.contrib.DoWGState",
        ]),
        ("Galore", [
            "optax_compat.contrib.galore", "optax_compat.contrib.scale_by_galore",
            "optax_compat.contrib.GaLoreState", "optax_compat.contrib.GaLoreDimensionNumbers",
        ]),
        ("Sophia", [
            "optax_compat.contrib.hutchinson_estimator_diag_hessian",
            "optax_compat.contrib.HutchinsonState", "optax_compat.contrib.sophia",
            "optax_compat.contrib.SophiaState",
        ]),
        ("Madgrad", [
            "optax_compat.contrib.madgrad", "optax_compat.contrib.MadgradState",
            "optax_compat.contrib.scale_by_madgrad",
        ]),
        ("Mechanize", [
            "optax_compat.contrib.MechanicState", "optax_compat.contrib.mechanize",
        ]),
        ("Momo", [
            "optax_compat.contrib.momo", "optax_compat.contrib.momo_adam",
            "optax_compat.contrib.MomoAdamState", "optax_compat.contrib.MomoState",
        ]),
        ("Muon", [
            "optax_compat.contrib.muon", "optax_compat.contrib.MuonState",
            "optax_compat.contrib.scale_by_muon", "optax_compat.contrib.MuonDimensionNumbers",
        ]),
        ("Prodigy", [
            "optax_compat.contrib.prodigy", "optax_compat.contrib.ProdigyState",
        ]),
        ("Sharpness aware minimization", [
            "optax_compat.contrib.sam", "optax_compat.contrib.SAMState",
        ]),
        ("Simplified AdEMAMix", [
            "optax_compat.contrib.scale_by_simplified_ademamix",
            "optax_compat.contrib.ScaleBySimplifiedAdEMAMixState",
            "optax_compat.contrib.simplified_ademamix",
        ]),
        ("Schedule-Free", [
            "optax_compat.contrib.schedule_free", "optax_compat.contrib.schedule_free_adamw",
            "optax_compat.contrib.schedule_free_eval_params",
            "optax_compat.contrib.schedule_free_sgd", "optax_compat.contrib.ScheduleFreeState",
        ]),
        ("Complex-valued Optimization", [
            "optax_compat.contrib.split_real_and_imaginary",
            "optax_compat.contrib.SplitRealAndImaginaryState",
        ]),
        ("Normalization", [
            "optax_compat.contrib.normalize",
        ]),
    ]),
    ("optax_compat/second_order", "Second-order utilities", "", [
        ("Second order", [
            "optax_compat.second_order.fisher_diag", "optax_compat.second_order.hessian_diag",
            "optax_compat.second_order.hvp",
        ]),
    ]),
    ("optax_compat/perturbations", "Perturbations", "", [
        ("Gumbel noise", [
            "optax_compat.perturbations.Gumbel",
        ]),
        ("Make perturbed function", [
            "optax_compat.perturbations.make_perturbed_fun",
        ]),
        ("Normal noise", [
            "optax_compat.perturbations.Normal",
        ]),
    ]),
    ("optax_compat/assignment", "Assignment", "", [
        ("Hungarian algorithm", [
            "optax_compat.assignment.hungarian_algorithm",
            "optax_compat.assignment.base_hungarian_algorithm",
        ]),
    ]),
    ("optax_compat/microbatching", "Microbatching", "", [
        ("Microbatching", [
            "optax_compat.microbatching.AccumulationType",
            "optax_compat.microbatching.Accumulator", "optax_compat.microbatching.micro_grad",
            "optax_compat.microbatching.micro_vmap", "optax_compat.microbatching.microbatch",
            "optax_compat.microbatching.reshape_batch_axis",
        ]),
    ]),
    ("optax_compat/experimental", "Experimental", "", [
        ("Aggregating", [
            "optax_compat.experimental.aggregating.accumulate_avg_updates",
            "optax_compat.experimental.aggregating.AccumulateAvgUpdatesState",
            "optax_compat.experimental.aggregating.add_mean_variance_to_opt",
            "optax_compat.experimental.aggregating.Aggregator",
            "optax_compat.experimental.aggregating.AggregatorUpdateFn",
            "optax_compat.experimental.aggregating.average_incrementally_updates",
            "optax_compat.experimental.aggregating.average_per_element_updates",
            "optax_compat.experimental.aggregating.get_batch_size_from_per_elt_updates",
            "optax_compat.experimental.aggregating.get_per_element_mean_and_sum_sq_diff_grads",
            "optax_compat.experimental.aggregating.get_unbiased_mean_and_variance_ema",
            "optax_compat.experimental.aggregating.MaybeAxis",
            "optax_compat.experimental.aggregating.AggregatedUpdates",
            "optax_compat.experimental.aggregating.PerElementUpdates",
            "optax_compat.experimental.aggregating.PerElementMeanAndSumSqDiffGradsState",
            "optax_compat.experimental.aggregating.PerElementMeanAndVarianceEMAState",
            "optax_compat.experimental.aggregating.process",
            "optax_compat.experimental.aggregating.track_per_element_mean_and_variance_with_ema",
        ]),
    ]),
    ("optax_compat/testing", "Testing", "", [
        ("Checks against Optax and properties", [
            "optax_compat.testing.check_matches_optax", "optax_compat.testing.check_pure",
            "optax_compat.testing.check_differentiable", "optax_compat.testing.check_compilable",
            "optax_compat.testing.check_state_stable",
        ]),
        ("Checks of capability declarations", [
            "optax_compat.testing.check_declarations", "optax_compat.testing.check_elementwise",
            "optax_compat.testing.check_global_reduction", "optax_compat.testing.check_per_leaf",
            "optax_compat.testing.check_inplace",
        ]),
        ("Assertions", [
            "optax_compat.testing.assert_trees_all_close",
            "optax_compat.testing.assert_tree_structure_equal",
            "optax_compat.testing.assert_leaves_close",
            "optax_compat.testing.assert_same_state_types",
            "optax_compat.testing.assert_inplace_matches_pure",
        ]),
        ("Comparison engine", [
            "optax_compat.testing.compare_with_optax",
            "optax_compat.testing.compare_function_with_optax",
            "optax_compat.testing.state_signature", "optax_compat.testing.jax_precision",
            "optax_compat.testing.jit_optax", "optax_compat.testing.to_jax",
            "optax_compat.testing.to_numpy", "optax_compat.testing.to_torch",
        ]),
        ("Tolerances that follow the dtype of the values compared", [
            "optax_compat.testing.tolerance", "optax_compat.testing.Tolerances",
            "optax_compat.testing.Tolerance", "optax_compat.testing.RTOL",
            "optax_compat.testing.ATOL",
        ]),
        ("Test data", [
            "optax_compat.testing.make_tree", "optax_compat.testing.random_tree",
            "optax_compat.testing.seeded_randn", "optax_compat.testing.seeded_randint",
        ]),
    ]),
    ("optax_compat/porting", "Porting from JAX", "", [
        ("JAX's x64 switch", ["optax_compat.config"]),
        ("Keys and tree paths", [
            "optax_compat.porting.split_key", "optax_compat.porting.KeyLike",
            "optax_compat.porting.DictKey", "optax_compat.porting.SequenceKey",
            "optax_compat.porting.GetAttrKey", "optax_compat.porting.NamedTupleKey",
        ]),
    ]),
    ("torchopt_fn/functional_optimizers", "Functional optimizers", "", [
        ("Aliases", [
            "torchopt_fn.adam", "torchopt_fn.adamw", "torchopt_fn.adamax", "torchopt_fn.adadelta",
            "torchopt_fn.adagrad", "torchopt_fn.radam", "torchopt_fn.rmsprop", "torchopt_fn.sgd",
        ]),
        ("Wrapper for function optimization", [
            "torchopt_fn.FuncOptimizer",
        ]),
    ]),
    ("torchopt_fn/classic_optimizers", "Classic optimizers", "", [
        ("Base class", ["torchopt_fn.Optimizer"]),
        ("Optimizers", [
            "torchopt_fn.SGD", "torchopt_fn.Adam", "torchopt_fn.AdamW", "torchopt_fn.AdaMax",
            "torchopt_fn.AdaDelta", "torchopt_fn.AdaGrad", "torchopt_fn.RAdam",
            "torchopt_fn.RMSProp",
        ]),
    ]),
    ("torchopt_fn/meta_optimizers", "Differentiable meta-optimizers", "", [
        ("Base class", ["torchopt_fn.MetaOptimizer"]),
        ("Meta-optimizers", [
            "torchopt_fn.MetaSGD", "torchopt_fn.MetaAdam", "torchopt_fn.MetaAdamW",
            "torchopt_fn.MetaAdaMax", "torchopt_fn.MetaAdaDelta", "torchopt_fn.MetaAdaGrad",
            "torchopt_fn.MetaRAdam", "torchopt_fn.MetaRMSProp",
        ]),
    ]),
    ("torchopt_fn/implicit_differentiation", "Implicit differentiation", "", [
        ("Custom root", ["torchopt_fn.diff.implicit.custom_root"]),
        ("Object-oriented API", [
            "torchopt_fn.diff.implicit.ImplicitMetaGradientModule",
            "torchopt_fn.nn.MetaGradientModule",
        ]),
    ]),
    ("torchopt_fn/linear_system_solvers", "Linear system solvers", "", [
        ("Solvers for ``custom_root``", [
            "torchopt_fn.linear_solve.solve_cg", "torchopt_fn.linear_solve.solve_normal_cg",
            "torchopt_fn.linear_solve.solve_inv",
        ]),
        ("Linear algebra", [
            "torchopt_fn.linalg.cg", "torchopt_fn.linalg.ns", "torchopt_fn.linalg.ns_inv",
        ]),
    ]),
    ("torchopt_fn/zero_order_differentiation", "Zero-order differentiation", "", [
        ("Decorator", ["torchopt_fn.diff.zero_order.zero_order"]),
        ("Object-oriented API", ["torchopt_fn.diff.zero_order.ZeroOrderGradientModule"]),
    ]),
    ("torchopt_fn/transformations", "Gradient transformations and hooks", "", [
        ("Transformations", [
            "torchopt_fn.clip_grad_norm", "torchopt_fn.nan_to_num", "torchopt_fn.transform.trace",
            "torchopt_fn.transform.scale", "torchopt_fn.transform.scale_by_schedule",
            "torchopt_fn.transform.add_decayed_weights", "torchopt_fn.transform.masked",
            "torchopt_fn.transform.scale_by_adam",
            "torchopt_fn.transform.scale_by_accelerated_adam",
            "torchopt_fn.transform.scale_by_adamax", "torchopt_fn.transform.scale_by_adadelta",
            "torchopt_fn.transform.scale_by_radam", "torchopt_fn.transform.scale_by_rss",
            "torchopt_fn.transform.scale_by_rms", "torchopt_fn.transform.scale_by_stddev",
        ]),
        ("Hooks", [
            "torchopt_fn.register_hook", "torchopt_fn.hook.zero_nan_hook",
            "torchopt_fn.hook.nan_to_num_hook",
        ]),
    ]),
    ("torchopt_fn/schedules", "Optimizer schedules", "", [
        ("Schedules", [
            "torchopt_fn.schedule.linear_schedule", "torchopt_fn.schedule.polynomial_schedule",
            "torchopt_fn.schedule.exponential_decay",
        ]),
    ]),
    ("torchopt_fn/updates_and_combinators", "Applying updates and combining", "", [
        ("Apply updates", ["torchopt_fn.apply_updates"]),
        ("Combining", ["torchopt_fn.chain", "torchopt_fn.combine.chain_flat"]),
        ("Types", [
            "torchopt_fn.base.GradientTransformation",
            "torchopt_fn.base.ChainedGradientTransformation", "torchopt_fn.base.EmptyState",
            "torchopt_fn.base.UninitializedState", "torchopt_fn.base.identity",
        ]),
    ]),
    ("torchopt_fn/utilities", "Utilities", "", [
        ("State dictionaries and module copies", [
            "torchopt_fn.extract_state_dict", "torchopt_fn.recover_state_dict",
            "torchopt_fn.stop_gradient", "torchopt_fn.module_clone", "torchopt_fn.module_detach_",
            "torchopt_fn.utils.ModuleState",
        ]),
        ("Reparametrization", [
            "torchopt_fn.nn.reparametrize", "torchopt_fn.nn.reparameterize",
            "torchopt_fn.nn.swap_state",
        ]),
        ("Accelerated operators", [
            "torchopt_fn.accelerated_op_available", "torchopt_fn.accelerated_op.AdamOp",
            "torchopt_fn.accelerated_op.fast_path",
        ]),
    ]),
    ("torchopt_fn/visual", "Visualizing gradient flow", "", [
        ("Graphs", [
            "torchopt_fn.visual.make_dot", "torchopt_fn.visual.resize_graph",
            "torchopt_fn.visual.GradientGraph", "torchopt_fn.visual.GraphvizNotInstalledError",
            "torchopt_fn.visual.LARGE_GRAPH_NODES",
        ]),
        ("Fusing your own optimizer steps", [
            "torchopt_fn.visual.tag_optimizer_step",
        ]),
        ("Colours and node meanings", [
            "torchopt_fn.visual.NODE_STYLES", "torchopt_fn.visual.NODE_MEANINGS",
        ]),
    ]),
    ("torchopt_fn/distributed", "Distributed utilities", "", [
        ("Initialization and process group", [
            "torchopt_fn.distributed.is_available", "torchopt_fn.distributed.auto_init_rpc",
            "torchopt_fn.distributed.barrier", "torchopt_fn.distributed.get_world_info",
            "torchopt_fn.distributed.get_world_rank", "torchopt_fn.distributed.get_rank",
            "torchopt_fn.distributed.get_world_size", "torchopt_fn.distributed.get_local_rank",
            "torchopt_fn.distributed.get_local_world_size", "torchopt_fn.distributed.get_worker_id",
        ]),
        ("Remote procedure call", [
            "torchopt_fn.distributed.TensorDimensionPartitioner",
            "torchopt_fn.distributed.dim_partitioner", "torchopt_fn.distributed.batch_partitioner",
            "torchopt_fn.distributed.mean_reducer", "torchopt_fn.distributed.sum_reducer",
            "torchopt_fn.distributed.remote_async_call", "torchopt_fn.distributed.remote_sync_call",
            "torchopt_fn.distributed.parallelize", "torchopt_fn.distributed.parallelize_async",
            "torchopt_fn.distributed.parallelize_sync",
        ]),
        ("Rank filters", [
            "torchopt_fn.distributed.on_rank", "torchopt_fn.distributed.not_on_rank",
            "torchopt_fn.distributed.rank_zero_only", "torchopt_fn.distributed.rank_non_zero_only",
        ]),
    ]),
    ("torchopt_fn/pytree", "Pytree utilities", "", [
        ("Constants", [
            "torchopt_fn.pytree.MAX_RECURSION_DEPTH", "torchopt_fn.pytree.NONE_IS_NODE",
            "torchopt_fn.pytree.NONE_IS_LEAF",
        ]),
        ("Tree arithmetic", [
            "torchopt_fn.pytree.tree_flatten_as_tuple", "torchopt_fn.pytree.tree_pos",
            "torchopt_fn.pytree.tree_neg", "torchopt_fn.pytree.tree_add",
            "torchopt_fn.pytree.tree_add_scalar_mul", "torchopt_fn.pytree.tree_sub",
            "torchopt_fn.pytree.tree_sub_scalar_mul", "torchopt_fn.pytree.tree_mul",
            "torchopt_fn.pytree.tree_matmul", "torchopt_fn.pytree.tree_scalar_mul",
            "torchopt_fn.pytree.tree_truediv", "torchopt_fn.pytree.tree_vdot_real",
        ]),
        ("Distributed trees", [
            "torchopt_fn.pytree.tree_wait", "torchopt_fn.pytree.tree_as_rref",
            "torchopt_fn.pytree.tree_to_here", "torchopt_fn.pytree.tree_local_value",
        ]),
    ]),
    ("torchopt_fn/typing", "Typing", "", [
        ("Type aliases", [f"torchopt_fn.typing.{name}" for name in (
            "Params", "Updates", "OptState", "Schedule", "ScalarOrSchedule", "Scalar", "Numeric",
            "PyTree", "Tensor", "OptionalTensor", "ListOfTensors", "TupleOfTensors",
            "SequenceOfTensors", "TensorOrTensors", "TensorTree", "ListOfOptionalTensors",
            "TupleOfOptionalTensors", "SequenceOfOptionalTensors",
            "OptionalTensorOrOptionalTensors", "OptionalTensorTree", "TensorContainer",
            "ModuleTensorContainers", "Future", "LinearSolver", "Device", "Size", "Distribution",
            "SampleFunc", "Samplable")]),
    ]),
]

TOC = [
    ("optax_compat", [slug for slug, *_ in PAGES if slug.startswith("optax_compat/")]),
    ("torchopt_fn", [slug for slug, *_ in PAGES if slug.startswith("torchopt_fn/")]),
]
