"""Every transformation's capability record, listed: what its ``update`` declares it can do.

The record (:mod:`optax_compat._runtime.capabilities`) is what the fast paths read:
``update(..., inplace=True)``, :func:`optax_compat.fused_step`'s layouts, ``None`` gradients and
the whole in-place step of :func:`optax_compat.inplace_step`. This table is the review point for
a change to any of them. Each transformation is built with its simplest arguments (the
defaults, and the simplest values of its required ones: ``optax_compat.testing``'s ranges).

A row reads ``<in-place> <layouts> <None gradients> <whole step>``:

* in-place: ``inplace`` (honours ``inplace=True``), ``drops-inplace`` (an entry drops the
  request), ``-`` (undeclared);
* layouts: the packed layouts ``fused_step`` may use (``flat``, ``stacked``), ``none`` (declared,
  neither allowed), ``-`` (undeclared);
* ``none-ok``: handles ``None`` gradients; ``whole-step``: carries a whole in-place step.
"""

import copy
import functools
import warnings

import hypothesis
import optree
import pytest
import torch

import optax_compat
from optax_compat import _runtime as bb
from optax_compat import testing
from optax_compat.testing import _hyperparameters, _transform_strategies

CAPABILITIES = {
    "adabelief": "inplace flat+stacked none-ok -",
    "adadelta": "inplace flat+stacked none-ok -",
    "adafactor": "inplace stacked none-ok -",
    "adagrad": "inplace flat+stacked none-ok -",
    "adam": "inplace flat+stacked none-ok whole-step",
    "adamax": "inplace flat+stacked none-ok -",
    "adamaxw": "inplace flat+stacked none-ok -",
    "adamw": "inplace flat+stacked none-ok whole-step",
    "adan": "inplace flat+stacked none-ok -",
    "adaptive_grad_clip": "- stacked none-ok -",
    "add_decayed_weights": "inplace flat+stacked none-ok -",
    "add_noise": "inplace - none-ok -",
    "amsgrad": "inplace flat+stacked none-ok -",
    "apply_every": "- - none-ok -",
    "centralize": "- stacked none-ok -",
    "clip": "inplace flat+stacked none-ok -",
    "clip_by_block_rms": "inplace stacked none-ok -",
    "clip_by_global_norm": "inplace flat none-ok -",
    "contrib.acprop": "inplace flat+stacked none-ok -",
    "contrib.ademamix": "inplace flat+stacked none-ok -",
    "contrib.adopt": "inplace flat+stacked none-ok -",
    "contrib.cocob": "inplace none none-ok -",
    "contrib.dadapt_adamw": "drops-inplace flat none-ok -",
    "contrib.differentially_private_aggregate": "- - none-ok -",
    "contrib.dog": "inplace none none-ok -",
    "contrib.dowg": "inplace none none-ok -",
    "contrib.dpsgd": "inplace none none-ok -",
    "contrib.galore": "inplace none none-ok -",
    "contrib.hutchinson_estimator_diag_hessian": "drops-inplace - none-ok -",
    "contrib.madgrad": "inplace none none-ok -",
    "contrib.momo": "drops-inplace - none-ok -",
    "contrib.momo_adam": "drops-inplace - none-ok -",
    "contrib.muon": "inplace - none-ok -",
    "contrib.normalize": "- - none-ok -",
    "contrib.prodigy": "drops-inplace flat none-ok -",
    "contrib.reduce_on_plateau": "drops-inplace - none-ok -",
    "contrib.scale_by_acprop": "inplace flat+stacked none-ok -",
    "contrib.scale_by_ademamix": "inplace flat+stacked none-ok -",
    "contrib.scale_by_adopt": "inplace flat+stacked none-ok -",
    "contrib.scale_by_cocob": "- - none-ok -",
    "contrib.scale_by_galore": "- - none-ok -",
    "contrib.scale_by_madgrad": "- - none-ok -",
    "contrib.scale_by_muon": "inplace - none-ok -",
    "contrib.scale_by_simplified_ademamix": "- flat+stacked none-ok -",
    "contrib.schedule_free_adamw": "drops-inplace flat+stacked none-ok -",
    "contrib.schedule_free_sgd": "drops-inplace flat+stacked none-ok -",
    "contrib.simplified_ademamix": "inplace flat+stacked none-ok -",
    "contrib.sophia": "inplace none none-ok -",
    "ema": "inplace flat+stacked none-ok -",
    "fromage": "inplace stacked none-ok -",
    "identity": "- flat+stacked none-ok -",
    "keep_params_nonnegative": "- flat+stacked none-ok -",
    "lamb": "inplace stacked none-ok -",
    "lars": "inplace stacked none-ok -",
    "lbfgs": "inplace none none-ok -",
    "lion": "inplace flat+stacked none-ok -",
    "nadam": "inplace flat+stacked none-ok whole-step",
    "nadamw": "inplace flat+stacked none-ok whole-step",
    "noisy_sgd": "inplace none none-ok -",
    "normalize_by_update_norm": "- flat none-ok -",
    "novograd": "inplace stacked none-ok -",
    "optimistic_adam": "inplace flat+stacked none-ok -",
    "optimistic_adam_v2": "inplace flat+stacked none-ok -",
    "optimistic_gradient_descent": "inplace flat+stacked none-ok -",
    "polyak_sgd": "inplace flat none-ok -",
    "radam": "inplace flat+stacked none-ok -",
    "rmsprop": "inplace flat+stacked none-ok -",
    "rprop": "inplace flat+stacked none-ok -",
    "scale": "inplace flat+stacked none-ok -",
    "scale_by_adadelta": "inplace flat+stacked none-ok -",
    "scale_by_adam": "inplace flat+stacked none-ok -",
    "scale_by_adamax": "inplace flat+stacked none-ok -",
    "scale_by_adan": "inplace flat+stacked none-ok -",
    "scale_by_amsgrad": "inplace flat+stacked none-ok -",
    "scale_by_backtracking_linesearch": "drops-inplace - none-ok -",
    "scale_by_belief": "inplace flat+stacked none-ok -",
    "scale_by_distance_over_gradients": "- - none-ok -",
    "scale_by_factored_rms": "inplace stacked none-ok -",
    "scale_by_lbfgs": "inplace - none-ok -",
    "scale_by_learning_rate": "drops-inplace flat+stacked none-ok -",
    "scale_by_lion": "inplace flat+stacked none-ok -",
    "scale_by_novograd": "inplace stacked none-ok -",
    "scale_by_optimistic_gradient": "inplace flat+stacked none-ok -",
    "scale_by_param_block_norm": "inplace stacked none-ok -",
    "scale_by_param_block_rms": "inplace stacked none-ok -",
    "scale_by_polyak": "drops-inplace flat none-ok -",
    "scale_by_radam": "inplace flat+stacked none-ok -",
    "scale_by_rms": "inplace flat+stacked none-ok -",
    "scale_by_rprop": "inplace flat+stacked none-ok -",
    "scale_by_rss": "inplace flat+stacked none-ok -",
    "scale_by_schedule": "inplace flat+stacked none-ok -",
    "scale_by_sign": "inplace flat+stacked none-ok -",
    "scale_by_sm3": "inplace stacked none-ok -",
    "scale_by_stddev": "inplace flat+stacked none-ok -",
    "scale_by_trust_ratio": "inplace stacked none-ok -",
    "scale_by_yogi": "inplace flat+stacked none-ok -",
    "scale_by_zoom_linesearch": "drops-inplace - none-ok -",
    "set_to_zero": "- flat+stacked none-ok -",
    "sgd": "inplace flat+stacked none-ok -",
    "sign_sgd": "inplace flat+stacked none-ok -",
    "signum": "inplace flat+stacked none-ok -",
    "sm3": "inplace stacked none-ok -",
    "trace": "inplace flat+stacked none-ok -",
    "yogi": "inplace flat+stacked none-ok -",
    "zero_nans": "- stacked none-ok -",
}


def _row(record: bb.Capabilities) -> str:
    inplace = {True: "inplace", False: "drops-inplace", None: "-"}[record.inplace]
    layouts = "-" if record.layouts is None else "+".join(
        layout for layout, why_not in record.layouts.items() if why_not is None) or "none"
    return " ".join([inplace, layouts, "none-ok" if record.tolerates_none else "-",
                     "whole-step" if record.whole_step is not None else "-"])


def _simplest(name: str) -> optax_compat.GradientTransformation:
    kwargs = hypothesis.find(_transform_strategies.hyperparameters(name), lambda _: True,
                             settings=hypothesis.settings(database=None, phases=[
                                 hypothesis.Phase.generate, hypothesis.Phase.shrink]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return functools.reduce(getattr, name.split("."), optax_compat)(**kwargs)


def test_the_table_lists_every_transformation_with_known_ranges():
    assert sorted(CAPABILITIES) == sorted(_transform_strategies.transform_names(
        include_random=True, include_extra_args=True, include_without_scalar_leaves=True)
        + [name for name, spec in _hyperparameters.SPECS.items() if spec.per_example_grads])


@pytest.mark.parametrize("name", sorted(CAPABILITIES))
def test_capabilities(name):
    assert _row(bb.capabilities_of(_simplest(name))) == CAPABILITIES[name]


def test_declarations_merge_in_any_order_and_wrappers_carry_them():
    def update(updates, state, params=None, *, inplace=False):
        return updates, state

    declared = bb.elementwise(bb.supports_inplace(update))
    assert bb.capabilities_of(declared) == bb.Capabilities(
        inplace=True, layouts={"flat": None, "stacked": None})
    wrapped = bb.tolerates_none(declared)
    assert bb.capabilities_of(wrapped) == bb.Capabilities(
        inplace=True, layouts={"flat": None, "stacked": None}, tolerates_none=True)
    with pytest.raises(TypeError):
        bb.declare(update, fast=True)


# --- each declaration holds on data (optax_compat.testing.check_declarations) ------------------

SHAPES = ((3, 4), (3, 4), (4,), (2, 3, 4))


def _tree(*shapes, seed=0):
    return {f"p{i}": testing.seeded_randn(*shape, seed=seed + i) for i, shape in enumerate(shapes)}


def _grads(step, shapes=SHAPES):
    return _tree(*shapes, seed=100 + 10 * step)


def _quadratic(params):
    return sum((p ** 2).sum() for p in optree.tree_leaves(params))


# What some transformations need beyond params and gradients: their data, extra arguments.
BATCHED = ((4, 3), (4, 2, 2))  # per-example gradients: a common batch axis
MATRICES = ((3, 4), (4, 3), (3, 4))
DATA = {
    "contrib.dpsgd": (BATCHED, {}),
    "contrib.muon": (MATRICES, {}),
    "contrib.scale_by_muon": (MATRICES, {}),
    "contrib.sophia": (SHAPES, {"obj_fn": _quadratic}),
    "lbfgs": (SHAPES, lambda step: {"value": torch.tensor(1.0 + step), "grad": _grads(step),
                                    "value_fn": _quadratic}),
    "polyak_sgd": (SHAPES, {"value": torch.tensor(2.0)}),
    "scale_by_polyak": (SHAPES, {"value": torch.tensor(2.0)}),
}
# What each row of the capability table is checked with on data (undeclared: nothing).
EXPECTED_CHECKS = {"flat+stacked": ("check_elementwise",), "flat": ("check_global_reduction",),
                   "stacked": ("check_per_leaf",), "none": (), "-": ()}


@pytest.mark.parametrize("name", sorted(CAPABILITIES))
def test_every_builtin_declaration_holds_on_data(name):
    shapes, extra_args = DATA.get(name, (SHAPES, None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ran = testing.check_declarations(_simplest(name), _tree(*shapes),
                                         lambda step: _grads(step, shapes), extra_args=extra_args)
    inplace, layouts = CAPABILITIES[name].split()[:2]
    assert ran == EXPECTED_CHECKS[layouts] + (("check_inplace",) if inplace == "inplace" else ())


def _in_float64(tree):
    return optree.tree_map(lambda x: x.double() if isinstance(x, torch.Tensor)
                           and x.is_floating_point() else x, tree)


@pytest.mark.parametrize("name", sorted(name for name, row in CAPABILITIES.items()
                                        if row.startswith("inplace ")))
def test_inplace_gives_the_pure_updates_when_float64_gradients_meet_a_float32_state(name):
    # ``model.double()`` between two steps of an in-place optimizer: the state is float32, the
    # gradients and params float64. A transformation that cannot write such values into its
    # buffers with its in-place kernels must still return updates apart from its state: the
    # next one of a chain scales them in place (trace, ema and lars once returned the new
    # trace itself, and ``scale`` then scaled the stored trace).
    shapes, extra_args = DATA.get(name, (SHAPES, None))
    extra = extra_args if callable(extra_args) else lambda step: extra_args or {}
    tx, params = _simplest(name), _tree(*shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, state = tx.update(_grads(0, shapes), tx.init(params), params, inplace=True,
                             **extra(0))
        params, grads = _in_float64(params), _in_float64(_grads(1, shapes))
        kwargs = {**_in_float64(extra(1)), **({"grad": grads} if "grad" in extra(1) else {})}
        pure_updates, _ = tx.update(grads, copy.deepcopy(state), params, **kwargs)
        updates, state = tx.update(optree.tree_map(torch.clone, grads), state, params,
                                   inplace=True, **kwargs)
    testing.assert_trees_all_close(updates, pure_updates, rtol=1e-6, atol=1e-7,
                                   what=f"{name}: in-place updates")
    kept = [x for x in optree.tree_leaves((state, params), namespace="optax_compat")
            if isinstance(x, torch.Tensor) and x.numel()]
    for update in optree.tree_leaves(updates, namespace="optax_compat"):
        assert not any(update.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
                       for x in kept), f"{name} returns an update in memory of its state"


def test_declaring_again_keeps_the_whole_step_and_how_it_reads_gradients():
    # SGD's whole step is torch's fused kernel, which reads new gradients in place (the fused
    # TorchOptimizer runs it for them); a user's declaration over it keeps both.
    tx = optax_compat.sgd(0.1, momentum=0.9)
    for declared in (tx, optax_compat.capabilities.elementwise(tx)):
        record = bb.capabilities_of(declared)
        assert record.whole_step is not None and record.whole_step_reads_grads_in_place
    assert not bb.capabilities_of(optax_compat.adam(0.1)).whole_step_reads_grads_in_place
    assert not bb.capabilities_of(optax_compat.sgd(0.1, momentum=0.0)
                                  ).whole_step_reads_grads_in_place
