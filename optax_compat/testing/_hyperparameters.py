"""Meaningful hyperparameter ranges for every alias and transform, as hypothesis strategies.

Each entry lists the arguments without a default (always drawn) and those with one (drawn or
left out, so that shrinking falls back to the defaults), with ranges in which the method is
used in practice: decay rates in ``[0, 0.999]``, small positive epsilons, learning rates in
``[1e-4, 1]``, block sizes small enough that tiny test tensors exercise the factored paths.
Arguments that only make sense when resuming a run (``step_offset``, ``decay_offset``) keep
their defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from hypothesis import strategies as st

# Stand for the learning rate (a number or, on request, a schedule) and for a schedule.
LEARNING_RATE = object()
SCHEDULE = object()


# The smallest normal float32: XLA flushes smaller (subnormal) float32 values to zero, PyTorch
# on CPU does not, so drawn values below it become 0.
_FLOAT32_TINY = 2.0 ** -126


def _between(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False,
                     allow_subnormal=False).map(
        lambda x: 0.0 if abs(x) < _FLOAT32_TINY and low <= 0.0 <= high else x)


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


DECAY = _between(0.0, 0.99)
# Schedule-free methods divide by b1 (x = (y - (1 - b1) z) / b1): near 0 it amplifies rounding
# without bound, and b1 = 0 gives 0 / 0 (NaN) or inf, differently on either side.
SCHEDULE_FREE_B1 = _between(0.1, 0.99)
SECOND_DECAY = _between(0.5, 0.999)
EPS = _between(1e-8, 1e-3)
EPS_ROOT = st.sampled_from([0.0, 1e-8, 1e-6])
WEIGHT_DECAY = _between(0.0, 0.1)
MOMENTUM = _optional(DECAY)
DTYPE = st.sampled_from([None, torch.float32, torch.float64])
BOOL = st.booleans()
POSITIVE = _between(0.01, 10.0)
SEED = st.integers(0, 2**31 - 1)
SMALL_DIM = st.integers(1, 4)


@dataclasses.dataclass(frozen=True)
class Spec:
    """How to draw the arguments of one public transformation.

    Attributes:
      required: arguments that have no default.
      optional: arguments with a default, drawn or left out.
      extra_args: the extra ``update`` keyword arguments it needs (``value``, ``grad``,
        ``value_fn``); transformations needing them are left out of ``transforms()``.
      random: whether it draws random numbers (compare statistically, not bit for bit).
      scalar_leaves: whether it accepts 0-d leaves (SM3 needs at least one dimension).
      matrix_leaves: whether it accepts only 2-d leaves (Muon's orthogonalisation without
        dimension numbers); implies ``scalar_leaves=False``.
      per_example_grads: whether its updates are per-example gradients with a leading batch
        dimension (differential privacy); left out of ``transforms()``.
    """

    required: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    optional: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    random: bool = False
    scalar_leaves: bool = True
    matrix_leaves: bool = False
    per_example_grads: bool = False

    def __post_init__(self) -> None:
        if self.matrix_leaves and self.scalar_leaves:
            raise ValueError("Spec: matrix_leaves=True needs scalar_leaves=False")


def _adam_like(**more: Any) -> dict[str, Any]:
    return {"b1": DECAY, "b2": SECOND_DECAY, "eps": EPS, "eps_root": EPS_ROOT, **more}


_ADAM = _adam_like(mu_dtype=DTYPE, nesterov=BOOL)
_RMS = {"decay": DECAY, "eps": EPS, "initial_scale": _between(0.0, 1.0), "eps_in_sqrt": BOOL,
        "bias_correction": BOOL}
_LR = {"learning_rate": LEARNING_RATE}
_RPROP = {"eta_minus": _between(0.1, 0.9), "eta_plus": _between(1.01, 2.0),
          "min_step_size": _between(1e-6, 1e-3), "max_step_size": _between(1.0, 50.0)}
_POLYAK = {"f_min": _between(-1.0, 0.0), "max_learning_rate": POSITIVE, "eps": EPS_ROOT,
           "variant": st.sampled_from(["sps", "sps+"])}
_FACTORED = {"min_dim_size_to_factor": SMALL_DIM, "decay_rate": _between(0.5, 0.9),
             "factored": BOOL}

SPECS: dict[str, Spec] = {
    # Stateless transforms without arguments.
    "identity": Spec(), "set_to_zero": Spec(), "centralize": Spec(), "scale_by_sign": Spec(),
    "zero_nans": Spec(), "keep_params_nonnegative": Spec(),
    # Transforms (optax/_src/transform.py and optax/transforms).
    "scale": Spec({"step_size": _between(-1.0, 1.0)}),
    "scale_by_learning_rate": Spec({}, {**_LR, "flip_sign": BOOL}),
    "scale_by_schedule": Spec({"step_size_fn": SCHEDULE}),
    "trace": Spec({"decay": DECAY}, {"nesterov": BOOL, "accumulator_dtype": DTYPE}),
    "ema": Spec({"decay": DECAY}, {"debias": BOOL, "accumulator_dtype": DTYPE}),
    "apply_every": Spec({}, {"k": st.integers(1, 4)}),
    "add_decayed_weights": Spec({}, {"weight_decay": WEIGHT_DECAY}),
    "add_noise": Spec({"eta": _between(0.0, 1.0), "gamma": _between(0.5, 0.6), "key": SEED},
                      random=True),
    "clip": Spec({"max_delta": POSITIVE}),
    "clip_by_block_rms": Spec({"threshold": POSITIVE}),
    "clip_by_global_norm": Spec({"max_norm": POSITIVE}),
    "adaptive_grad_clip": Spec({"clipping": _between(0.01, 1.0)}, {"eps": EPS}),
    "normalize_by_update_norm": Spec({}, {"scale_factor": _between(0.1, 2.0), "eps": EPS}),
    "scale_by_adadelta": Spec({}, {"rho": _between(0.5, 0.99), "eps": EPS}),
    "scale_by_adam": Spec({}, _ADAM),
    "scale_by_adamax": Spec({}, {"b1": DECAY, "b2": SECOND_DECAY, "eps": EPS}),
    "scale_by_adan": Spec({}, {"b1": SECOND_DECAY, "b2": SECOND_DECAY, "b3": SECOND_DECAY,
                               "eps": EPS, "eps_root": EPS_ROOT}),
    "scale_by_amsgrad": Spec({}, _adam_like(mu_dtype=DTYPE, bias_correction_mu=BOOL,
                                            bias_correction_nu=BOOL)),
    "scale_by_belief": Spec({}, _adam_like(nesterov=BOOL)),
    "scale_by_distance_over_gradients": Spec({}, {"reps_rel": _between(1e-6, 1e-3), "eps": EPS,
                                                  "global_scale": _between(0.1, 2.0)}),
    "scale_by_factored_rms": Spec({}, {**_FACTORED, "epsilon": _between(1e-30, 1e-3)}),
    "scale_by_lbfgs": Spec({}, {"memory_size": st.integers(1, 5), "scale_init_precond": BOOL}),
    "scale_by_lion": Spec({}, {"b1": DECAY, "b2": SECOND_DECAY, "mu_dtype": DTYPE}),
    "scale_by_novograd": Spec({}, {"b1": DECAY, "b2": _between(0.1, 0.99), "eps": EPS,
                                   "eps_root": EPS_ROOT, "weight_decay": WEIGHT_DECAY,
                                   "mu_dtype": DTYPE}),
    "scale_by_optimistic_gradient": Spec({}, {"alpha": _between(0.0, 2.0),
                                              "beta": _between(0.0, 2.0)}),
    "scale_by_param_block_norm": Spec({}, {"min_scale": _between(1e-4, 1e-2)}),
    "scale_by_param_block_rms": Spec({}, {"min_scale": _between(1e-4, 1e-2)}),
    "scale_by_polyak": Spec({}, _POLYAK, extra_args=("value",)),
    "scale_by_radam": Spec({}, {**_adam_like(nesterov=BOOL), "threshold": _between(3.0, 6.0)}),
    "scale_by_rms": Spec({}, _RMS),
    "scale_by_rprop": Spec({"learning_rate": _between(1e-3, 1.0)}, _RPROP),
    "scale_by_rss": Spec({}, {"initial_accumulator_value": _between(0.0, 1.0), "eps": EPS}),
    "scale_by_sm3": Spec({}, {"b1": DECAY, "b2": _between(0.9, 1.0), "eps": EPS},
                         scalar_leaves=False),
    "scale_by_stddev": Spec({}, _RMS),
    "scale_by_trust_ratio": Spec({}, {"min_norm": _between(0.0, 1.0),
                                      "trust_coefficient": _between(1e-3, 1.0), "eps": EPS_ROOT}),
    "scale_by_yogi": Spec({}, {**_adam_like(), "eps": _between(1e-6, 1e-2),
                               "initial_accumulator_value": _between(1e-6, 1.0)}),
    "scale_by_backtracking_linesearch": Spec(
        {"max_backtracking_steps": st.integers(1, 10)},
        {"decrease_factor": _between(0.1, 0.9), "increase_factor": _between(1.0, 2.0),
         "max_learning_rate": POSITIVE}, extra_args=("value", "grad", "value_fn")),
    "scale_by_zoom_linesearch": Spec(
        {"max_linesearch_steps": st.integers(1, 10)},
        {"initial_guess_strategy": st.sampled_from(["keep", "one"])},
        extra_args=("value", "grad", "value_fn")),
    # Aliases (optax/_src/alias.py).
    "adabelief": Spec(_LR, {**_adam_like(), "eps": _between(1e-16, 1e-8),
                            "eps_root": _between(1e-16, 1e-8), "nesterov": BOOL}),
    "adadelta": Spec({}, {"learning_rate": _optional(_between(1e-3, 1.0)),
                          "rho": _between(0.5, 0.99), "eps": EPS,
                          "weight_decay": WEIGHT_DECAY}),
    "adafactor": Spec({}, {**_FACTORED, "learning_rate": _optional(_between(1e-3, 1.0)),
                           "multiply_by_parameter_scale": BOOL,
                           "clipping_threshold": _optional(_between(0.5, 2.0)),
                           "momentum": MOMENTUM,
                           "weight_decay_rate": _optional(WEIGHT_DECAY),
                           "eps": _between(1e-30, 1e-3)}),
    "adagrad": Spec(_LR, {"initial_accumulator_value": _between(0.0, 1.0), "eps": EPS}),
    "adam": Spec(_LR, _ADAM),
    "adamw": Spec(_LR, {**_ADAM, "weight_decay": WEIGHT_DECAY}),
    "adamax": Spec(_LR, {"b1": DECAY, "b2": SECOND_DECAY, "eps": EPS}),
    "adamaxw": Spec(_LR, {"b1": DECAY, "b2": SECOND_DECAY, "eps": EPS,
                          "weight_decay": WEIGHT_DECAY}),
    "adan": Spec(_LR, {"b1": SECOND_DECAY, "b2": SECOND_DECAY, "b3": SECOND_DECAY, "eps": EPS,
                       "eps_root": EPS_ROOT, "weight_decay": WEIGHT_DECAY}),
    "amsgrad": Spec(_LR, _adam_like(mu_dtype=DTYPE, bias_correction_mu=BOOL,
                                    bias_correction_nu=BOOL)),
    "fromage": Spec(_LR, {"min_norm": _between(1e-6, 1e-3)}),
    "lamb": Spec(_LR, {**_adam_like(), "eps": _between(1e-6, 1e-3),
                       "weight_decay": WEIGHT_DECAY}),
    "lars": Spec(_LR, {"weight_decay": WEIGHT_DECAY, "trust_coefficient": _between(1e-3, 0.1),
                       "eps": EPS_ROOT, "momentum": DECAY, "nesterov": BOOL}),
    "lbfgs": Spec({}, {"learning_rate": _optional(_between(1e-3, 1.0)),
                       "memory_size": st.integers(1, 5), "scale_init_precond": BOOL},
                  extra_args=("value", "grad", "value_fn")),
    "lion": Spec(_LR, {"b1": DECAY, "b2": SECOND_DECAY, "mu_dtype": DTYPE,
                       "weight_decay": WEIGHT_DECAY}),
    "nadam": Spec(_LR, _ADAM),
    "nadamw": Spec(_LR, {**_ADAM, "weight_decay": WEIGHT_DECAY}),
    "noisy_sgd": Spec({**_LR, "key": SEED}, {"eta": _between(0.0, 0.1),
                                             "gamma": _between(0.5, 0.6)}, random=True),
    "novograd": Spec(_LR, {"b1": DECAY, "b2": _between(0.1, 0.99), "eps": EPS,
                           "eps_root": EPS_ROOT, "weight_decay": WEIGHT_DECAY}),
    "optimistic_gradient_descent": Spec(_LR, {"alpha": _between(0.0, 2.0),
                                              "beta": _between(0.0, 2.0)}),
    "optimistic_adam": Spec({"learning_rate": _between(1e-4, 1.0)},
                            {**_ADAM, "optimism": _optional(_between(0.0, 1.0))}),
    "optimistic_adam_v2": Spec(_LR, {**_ADAM, "alpha": _between(0.0, 2.0),
                                     "beta": _between(0.0, 2.0)}),
    "polyak_sgd": Spec({}, {**_POLYAK, "scaling": _between(0.1, 2.0)}, extra_args=("value",)),
    "radam": Spec(_LR, {**_adam_like(nesterov=BOOL), "threshold": _between(3.0, 6.0)}),
    "rmsprop": Spec(_LR, {**_RMS, "centered": BOOL, "momentum": MOMENTUM, "nesterov": BOOL}),
    "rprop": Spec({"learning_rate": _between(1e-3, 1.0)}, _RPROP),
    "sgd": Spec(_LR, {"momentum": MOMENTUM, "nesterov": BOOL, "accumulator_dtype": DTYPE}),
    "sign_sgd": Spec(_LR),
    "signum": Spec(_LR, {"beta": DECAY, "accumulator_dtype": DTYPE}),
    "sm3": Spec({"learning_rate": _between(1e-4, 1.0)}, {"momentum": DECAY},
                scalar_leaves=False),
    "yogi": Spec(_LR, {"b1": DECAY, "b2": SECOND_DECAY, "eps": _between(1e-6, 1e-2)}),
    # optax.contrib.
    "contrib.acprop": Spec(_LR, {**_adam_like(), "eps": _between(1e-16, 1e-8),
                                 "eps_root": _between(1e-16, 1e-8),
                                 "weight_decay": WEIGHT_DECAY}),
    "contrib.scale_by_acprop": Spec({}, {"b1": DECAY, "b2": SECOND_DECAY,
                                         "eps": _between(1e-16, 1e-8)}),
    "contrib.ademamix": Spec(_LR, {**_adam_like(mu_dtype=DTYPE), "b3": _between(0.9, 0.9999),
                                   "alpha": _between(0.0, 8.0), "weight_decay": WEIGHT_DECAY}),
    "contrib.scale_by_ademamix": Spec({}, {**_adam_like(), "b3": _between(0.9, 0.9999),
                                           "alpha": _between(0.0, 8.0)}),
    "contrib.simplified_ademamix": Spec(_LR, {"b1": _between(0.5, 0.99), "b2": SECOND_DECAY,
                                              "alpha": _between(0.0, 8.0), "eps": EPS,
                                              "weight_decay": WEIGHT_DECAY}),
    "contrib.scale_by_simplified_ademamix": Spec({}, {"b1": _between(0.5, 0.99),
                                                      "b2": SECOND_DECAY,
                                                      "alpha": _between(0.0, 8.0), "eps": EPS}),
    "contrib.adopt": Spec(_LR, {"b1": DECAY, "b2": SECOND_DECAY, "eps": EPS,
                                "nesterov": BOOL, "use_clipping": BOOL}),
    "contrib.scale_by_adopt": Spec({}, {"b1": DECAY, "b2": SECOND_DECAY, "eps": EPS,
                                        "nesterov": BOOL, "use_clipping": BOOL}),
    "contrib.cocob": Spec({}, {"learning_rate": _between(0.1, 1.0),
                               "alpha": _between(10.0, 200.0), "eps": EPS,
                               "weight_decay": WEIGHT_DECAY}),
    "contrib.scale_by_cocob": Spec({}, {"alpha": _between(10.0, 200.0), "eps": EPS}),
    "contrib.dadapt_adamw": Spec({}, {"learning_rate": _between(0.1, 1.0), "eps": EPS,
                                      "estim_lr0": _between(1e-7, 1e-4),
                                      "weight_decay": WEIGHT_DECAY}),
    "contrib.prodigy": Spec({}, {"learning_rate": _between(0.1, 1.0), "eps": EPS,
                                 "estim_lr0": _between(1e-7, 1e-4),
                                 "estim_lr_coef": _between(0.5, 2.0),
                                 "weight_decay": WEIGHT_DECAY, "safeguard_warmup": BOOL}),
    "contrib.dog": Spec({}, {"learning_rate": _between(0.1, 1.0), "eps": EPS,
                             "weight_decay": _optional(WEIGHT_DECAY)}),
    "contrib.dowg": Spec({}, {"learning_rate": _between(0.1, 1.0),
                              "eps": _between(1e-6, 1e-3),
                              "weight_decay": _optional(WEIGHT_DECAY)}),
    "contrib.madgrad": Spec(_LR, {"momentum": DECAY, "weight_decay": WEIGHT_DECAY,
                                  "eps": _between(1e-6, 1e-3)}),
    "contrib.scale_by_madgrad": Spec(_LR, {"momentum": DECAY, "eps": _between(1e-6, 1e-3)}),
    "contrib.momo": Spec({}, {"learning_rate": _between(0.01, 1.0), "beta": DECAY,
                              "lower_bound": _between(-1.0, 0.0),
                              "weight_decay": WEIGHT_DECAY, "adapt_lower_bound": BOOL},
                         extra_args=("value",)),
    "contrib.momo_adam": Spec({}, {"learning_rate": _between(1e-3, 0.1), "b1": DECAY,
                                   "b2": SECOND_DECAY, "eps": EPS,
                                   "lower_bound": _between(-1.0, 0.0),
                                   "weight_decay": WEIGHT_DECAY, "adapt_lower_bound": BOOL},
                              extra_args=("value",)),
    "contrib.muon": Spec(_LR, {"ns_steps": st.integers(1, 6), "beta": _between(0.5, 0.99),
                               "eps": EPS, "weight_decay": WEIGHT_DECAY, "nesterov": BOOL,
                               "adam_b1": DECAY, "adam_b2": SECOND_DECAY}),
    "contrib.scale_by_muon": Spec({}, {"ns_steps": st.integers(1, 6),
                                       "beta": _between(0.5, 0.99), "eps": EPS,
                                       "nesterov": BOOL},
                                  scalar_leaves=False, matrix_leaves=True),
    "contrib.normalize": Spec(),
    "contrib.reduce_on_plateau": Spec({}, {"factor": _between(0.1, 0.9),
                                           "patience": st.integers(1, 5),
                                           "rtol": _between(0.0, 1e-2),
                                           "cooldown": st.integers(0, 3),
                                           "accumulation_size": st.integers(1, 3),
                                           "min_scale": _between(0.0, 0.1)},
                                      extra_args=("value",)),
    "contrib.schedule_free_adamw": Spec({}, {"learning_rate": _between(1e-3, 0.1),
                                             "warmup_steps": _optional(st.integers(1, 5)),
                                             "b1": SCHEDULE_FREE_B1, "b2": SECOND_DECAY,
                                             "eps": EPS, "weight_decay": WEIGHT_DECAY}),
    "contrib.sophia": Spec(_LR, {"b1": DECAY, "b2": SECOND_DECAY, "eps": EPS,
                                 "weight_decay": WEIGHT_DECAY, "gamma": _between(1e-3, 0.1),
                                 "clip_threshold": _optional(_between(0.5, 2.0)),
                                 "update_interval": st.integers(1, 3)},
                           extra_args=("obj_fn",), random=True),
    "contrib.hutchinson_estimator_diag_hessian": Spec({}, {"random_seed": SEED},
                                                      extra_args=("obj_fn",), random=True),
    "contrib.dpsgd": Spec({**_LR, "l2_norm_clip": POSITIVE,
                           "noise_multiplier": _between(0.0, 1.0), "seed": SEED},
                          {"momentum": MOMENTUM, "nesterov": BOOL}, random=True,
                          per_example_grads=True),
    "contrib.differentially_private_aggregate": Spec(
        {"l2_norm_clip": POSITIVE, "noise_multiplier": _between(0.0, 1.0), "key": SEED},
        random=True, per_example_grads=True),
    "contrib.galore": Spec(_LR, {"rank": st.integers(1, 2), "update_proj_gap": st.integers(1, 5),
                                 "scale": _between(0.5, 2.0), "weight_decay": WEIGHT_DECAY}),
    "contrib.scale_by_galore": Spec({}, {"rank": st.integers(1, 2),
                                         "update_proj_gap": st.integers(1, 5),
                                         "scale": _between(0.5, 2.0)}),
    "contrib.schedule_free_sgd": Spec({}, {"learning_rate": _between(1e-3, 1.0),
                                           "warmup_steps": _optional(st.integers(1, 5)),
                                           "b1": SCHEDULE_FREE_B1,
                                           "weight_decay": _optional(WEIGHT_DECAY)}),
}


def spec(name: str) -> Spec:
    """The :class:`Spec` of a public transformation name."""
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"No hyperparameter ranges are known for {name!r}; known names: "
                         f"{', '.join(sorted(SPECS))}.") from None
