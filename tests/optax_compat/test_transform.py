"""``optax_compat._src.transform`` against real Optax, plus its in-place path, purity,
differentiability and errors."""

from __future__ import annotations

import inspect

import optax
import optree
import pytest
import torch

import optax_compat
from optax_compat import _runtime as bb
from optax_compat._src import base
from optax_compat._src import transform as T
from optax_compat.testing import (
    assert_inplace_matches_pure,
    compare_with_optax,
    jit_optax,
    make_tree,
)
from tests.optax_compat.combinator_cases import CASES_AND_DTYPES, INNER_CASES, jitted

DTYPES = [torch.float32, torch.float64]


def _tree_without_scalars(dtype: torch.dtype, seed: int) -> dict:
    tree = make_tree(dtype, seed)
    del tree["bias"]
    return tree


# (name, args, kwargs, optax kwargs if they differ): every option at least once; defaults are
# run where they select a distinct code path or state type (signatures are compared below).
CASES = [
    ("scale", (0.5,), {}, None),
    ("scale_by_learning_rate", (0.1,), {}, None),
    ("scale_by_learning_rate", (0.1,), {"flip_sign": False}, None),
    ("scale_by_sign", (), {}, None),
    ("scale_by_rss", (0.5, 1e-3), {}, None),
    ("scale_by_rms", (), {}, None),
    ("scale_by_rms", (0.8, 1e-4, 0.1), {"eps_in_sqrt": False, "bias_correction": True}, None),
    ("scale_by_stddev", (), {}, None),
    ("scale_by_stddev", (0.8, 1e-4, 0.1), {"eps_in_sqrt": False, "bias_correction": True},
     None),
    ("scale_by_adam", (), {}, None),
    ("scale_by_adam", (0.8, 0.99, 1e-6, 1e-8), {"nesterov": True}, None),
    ("scale_by_adam", (), {"eps_root": 1e-6}, None),
    ("scale_by_amsgrad", (), {"eps_root": 1e-8, "bias_correction_mu": False,
                              "bias_correction_nu": False}, None),
    ("scale_by_adamax", (), {}, None),
    ("scale_by_lion", (), {}, None),
    ("scale_by_lion", (), {"mode": "smooth", "smooth_beta": 2.0}, None),
    ("scale_by_lion", (0.5, 0.9), {"mode": "refined"}, None),
    ("scale_by_belief", (), {}, None),
    ("scale_by_belief", (), {"nesterov": True}, None),
    ("scale_by_yogi", (0.8, 0.9, 1e-2, 1e-6, 0.1), {}, None),
    ("scale_by_radam", (), {"threshold": 3.0}, None),
    ("scale_by_radam", (), {"nesterov": True, "eps_root": 1e-8, "threshold": 2.0}, None),
    ("scale_by_adadelta", (0.5, 1e-3), {}, None),
    ("scale_by_novograd", (0.8, 0.5, 1e-6, 1e-8, 0.1), {}, None),
    ("scale_by_adan", (0.9, 0.8, 0.95, 1e-6, 1e-8), {}, None),
    ("scale_by_trust_ratio", (0.5, 0.3, 1e-3), {}, None),
    ("scale_by_param_block_norm", (), {}, None),
    ("scale_by_param_block_rms", (0.5,), {}, None),
    ("scale_by_rprop", (0.1, 0.3, 1.5, 1e-3, 0.15), {}, None),
    ("scale_by_optimistic_gradient", (0.5, 0.3), {}, None),
    ("scale_by_distance_over_gradients", (1e-4, 1e-6), {"global_scale": -1.0}, None),
    ("centralize", (), {}, None),
    ("normalize_by_update_norm", (-2.0, 1e-3), {}, None),
    ("apply_every", (3,), {}, None),
]


def _case_id(case) -> str:
    name, args, kwargs, _ = case
    return f"{name}{args}{kwargs}".replace(" ", "")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_optax(case, dtype):
    name, args, kwargs, optax_kwargs = case
    compare_with_optax(getattr(T, name)(*args, **kwargs),
                       lambda: jit_optax(getattr(optax, name)(*args, **(optax_kwargs or kwargs))),
                       dtype, steps=6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kwargs", [{}, {"b1": 0.5, "b2": 0.9, "eps": 1e-4}])
def test_sm3_matches_optax(kwargs, dtype):
    # Optax's SM3 cannot handle 0-d leaves (neither can ours, which says so at init).
    compare_with_optax(T.scale_by_sm3(**kwargs), lambda: jit_optax(optax.scale_by_sm3(**kwargs)),
                       dtype, steps=5, params=_tree_without_scalars(dtype, 0),
                       grads=[_tree_without_scalars(dtype, i + 1) for i in range(5)])


def test_sm3_rejects_scalar_and_complex_params():
    with pytest.raises(ValueError, match=r"\['bias'\] is 0-d"):
        T.scale_by_sm3().init(make_tree())
    with pytest.raises(ValueError, match="complex"):
        T.scale_by_sm3().init({"w": torch.ones(2, dtype=torch.complex64)})


@pytest.mark.parametrize("dtype", DTYPES)
def test_schedules_match_optax(dtype):
    ours = optax_compat.schedules.linear_schedule(0.1, 0.01, 4)
    compare_with_optax(T.scale_by_learning_rate(ours),
                       lambda: jit_optax(optax.scale_by_learning_rate(
                           optax.linear_schedule(0.1, 0.01, 4))), dtype, steps=6)
    compare_with_optax(T.scale_by_schedule(optax_compat.schedules.exponential_decay(1.0, 2, 0.5)),
                       lambda: jit_optax(optax.scale_by_schedule(
                           optax.exponential_decay(1.0, 2, 0.5))), dtype, steps=5)


@pytest.mark.parametrize("variant", ["sps", "sps+"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_polyak_matches_optax(variant, dtype):
    def values(step: int) -> dict:
        return {"value": torch.tensor(2.0 - step, dtype=dtype)}  # negative gaps for sps+

    compare_with_optax(T.scale_by_polyak(f_min=0.5, max_learning_rate=0.7, eps=1e-3,
                                         variant=variant),
                       lambda: jit_optax(optax.scale_by_polyak(
                           f_min=0.5, max_learning_rate=0.7, eps=1e-3, variant=variant)),
                       dtype, steps=5, extra_args=values)


@pytest.mark.parametrize("name", ["scale_by_adam", "scale_by_amsgrad", "scale_by_lion"])
def test_low_precision_first_moment_matches_optax(name):
    import jax.numpy as jnp

    compare_with_optax(getattr(T, name)(mu_dtype=torch.float16),
                       lambda: jit_optax(getattr(optax, name)(mu_dtype=jnp.float16)),
                       torch.float32, steps=5)


def test_novograd_first_moment_dtype():
    state = T.scale_by_novograd(mu_dtype=torch.float64).init(make_tree(torch.float32))
    assert all(x.dtype == torch.float64 for x in optree.tree_leaves(state.mu))
    assert all(x.shape == () for x in optree.tree_leaves(state.nu))


def test_novograd_divides_narrower_updates_in_its_state_dtype_like_optax():
    """float32 updates (an inner ``mu_dtype``) over float64 params: JAX promotes them to the
    0-d float64 ``nu`` they are divided by."""
    import jax.numpy as jnp

    compare_with_optax(
        optax_compat.chain(T.scale_by_novograd(mu_dtype=torch.float32), T.scale_by_novograd()),
        lambda: jit_optax(optax.chain(optax.scale_by_novograd(mu_dtype=jnp.float32),
                                      optax.scale_by_novograd())), torch.float64, steps=3)


@pytest.mark.parametrize("name", ["scale_by_adam", "scale_by_amsgrad", "scale_by_lion"])
def test_mu_dtype_is_kept_across_steps(name):
    tx = getattr(T, name)(mu_dtype=torch.float64)
    params = make_tree(torch.float32)
    state = tx.init(params)
    for seed in range(2):
        updates, state = tx.update(make_tree(torch.float32, seed + 1), state, params)
    assert all(x.dtype == torch.float64 for x in optree.tree_leaves(state.mu))
    # As in JAX, the float64 moment promotes what is computed from it.
    assert all(x.dtype == torch.float64 for x in optree.tree_leaves(updates))


# ----------------------------------------------------------------------------------------------
# State types, counters.


def test_state_aliases_are_empty_state():
    for name in ("AdaptiveGradClipState", "AddDecayedWeightsState", "ClipByGlobalNormState",
                 "ClipState", "NonNegativeParamsState", "ScaleByTrustRatioState", "ScaleState"):
        assert getattr(base, name) is base.EmptyState
    assert optax_compat.ScaleState is base.EmptyState
    assert T.ScaleByTrustRatioState is base.EmptyState


STATE_FIELDS = {
    "ScaleByAdamState": ("count", "mu", "nu"),
    "ScaleByAmsgradState": ("count", "mu", "nu", "nu_max"),
    "ScaleByRmsState": ("nu",),
    "ScaleByRmsWithCountState": ("count", "nu"),
    "ScaleByRStdDevState": ("mu", "nu"),
    "ScaleByRStdDevWithCountState": ("count", "mu", "nu"),
    "ScaleByBeliefState": ("count", "mu", "nu"),
    "ScaleByAdaDeltaState": ("e_g", "e_x"),
    "ScaleByRssState": ("sum_of_squares",),
    "ScaleByLionState": ("count", "mu"),
    "ScaleByNovogradState": ("count", "mu", "nu"),
    "ScaleByAdanState": ("m", "v", "n", "g", "t"),
    "ScaleBySM3State": ("mu", "nu"),
    "ScaleByRpropState": ("step_sizes", "prev_updates"),
    "ScaleByScheduleState": ("count",),
    "ScaleByOptimisticGradientState": ("is_initial_step", "previous_gradient"),
    "ScaleByDistanceOverGradientsState": ("max_dist", "grad_sum_of_squares", "init_params"),
    "ApplyEvery": ("count", "grad_acc"),
}


@pytest.mark.parametrize("name", sorted(STATE_FIELDS))
def test_state_classes_match_optax(name):
    from optax._src import transform as optax_transform

    assert getattr(T, name)._fields == STATE_FIELDS[name]
    assert getattr(optax_transform, name)._fields == STATE_FIELDS[name]


@pytest.mark.parametrize("name", sorted({case[0] for case in CASES} | {"scale_by_sm3",
                                                                      "scale_by_polyak"}))
def test_signatures_match_optax(name):
    ours = inspect.signature(getattr(T, name)).parameters
    theirs = inspect.signature(getattr(optax, name)).parameters
    assert list(ours) == list(theirs)
    for key, parameter in theirs.items():
        assert ours[key].kind == parameter.kind, key
        if isinstance(parameter.default, (int, float, str, bool, type(None))):
            assert ours[key].default == parameter.default, key


@pytest.mark.parametrize("tx", [T.scale_by_adam(), T.scale_by_lion(), T.apply_every(2),
                                T.scale_by_schedule(lambda c: 0.1),
                                T.scale_by_rms(bias_correction=True), T.scale_by_adan()],
                         ids=["adam", "lion", "apply_every", "schedule", "rms", "adan"])
def test_counters_are_int32_scalars_that_count(tx):
    params = make_tree()
    state = tx.init(params)
    for seed in range(3):
        _, state = tx.update(make_tree(seed=seed + 1), state, params)
    counts = [x for x in optree.tree_leaves(state) if x.dtype == torch.int32]
    assert counts and all(c.shape == () for c in counts)
    assert any(int(c) in (1, 3) for c in counts)  # apply_every(2) wraps around to 1


# ----------------------------------------------------------------------------------------------
# In-place path, purity.


INPLACE = {
    "scale": lambda: T.scale(0.5),
    "scale_tensor": lambda: T.scale(torch.tensor(-0.3)),
    "learning_rate": lambda: T.scale_by_learning_rate(0.1),
    "learning_rate_schedule": lambda: T.scale_by_learning_rate(lambda count: 0.1 / (1 + count)),
    "sign": T.scale_by_sign,
    "adam": T.scale_by_adam,
    "adam_eps_root": lambda: T.scale_by_adam(eps_root=1e-8),
    "adam_nesterov": lambda: T.scale_by_adam(nesterov=True),
    "adam_mu_dtype": lambda: T.scale_by_adam(mu_dtype=torch.bfloat16),
    "rms": T.scale_by_rms,
    "rms_options": lambda: T.scale_by_rms(eps_in_sqrt=False, bias_correction=True),
    "lion": T.scale_by_lion,
    "lion_smooth": lambda: T.scale_by_lion(mode="smooth"),
    "adamax": T.scale_by_adamax,
    "rss": T.scale_by_rss,
    "stddev": T.scale_by_stddev,
    "stddev_bias_correction": lambda: T.scale_by_stddev(bias_correction=True),
    "radam": T.scale_by_radam,
    "adadelta": T.scale_by_adadelta,
    "belief": T.scale_by_belief,
    "yogi": T.scale_by_yogi,
    "amsgrad": T.scale_by_amsgrad,
    "amsgrad_mu_dtype": lambda: T.scale_by_amsgrad(mu_dtype=torch.bfloat16),
    "optimistic_gradient": T.scale_by_optimistic_gradient,
    "adan": T.scale_by_adan,
    "rprop": lambda: T.scale_by_rprop(0.1),
    "trust_ratio": T.scale_by_trust_ratio,
    "param_block_norm": T.scale_by_param_block_norm,
    "param_block_rms": T.scale_by_param_block_rms,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("label", sorted(INPLACE))
def test_inplace_is_bit_identical_to_pure(label, dtype):
    tx = INPLACE[label]()
    assert isinstance(tx, base.GradientTransformationExtraArgs)
    assert_inplace_matches_pure(tx, dtype, steps=4)


def _clone(tree):
    return optree.tree_map(torch.clone, tree, none_is_leaf=False)


def _assert_equal_trees(a, b):
    la, lb = optree.tree_leaves(a, none_is_leaf=False), optree.tree_leaves(b, none_is_leaf=False)
    assert len(la) == len(lb) and all(torch.equal(x, y) for x, y in zip(la, lb))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_pure_update_never_mutates_inputs(case):
    name, args, kwargs, _ = case
    tx = getattr(T, name)(*args, **kwargs)
    params = make_tree()
    state = tx.init(params)
    _, state = tx.update(make_tree(seed=1), state, params)
    updates, params_copy, state_copy = make_tree(seed=2), _clone(params), _clone(state)
    updates_copy = _clone(updates)
    tx.update(updates, state, params)
    _assert_equal_trees(updates, updates_copy)
    _assert_equal_trees(params, params_copy)
    _assert_equal_trees(state, state_copy)


# ----------------------------------------------------------------------------------------------
# Differentiability (pure mode): through two steps, w.r.t. a learning rate and a decay.


DIFFERENTIABLE = [
    (T.scale_by_adam, {}), (T.scale_by_adam, {"nesterov": True, "eps_root": 1e-8}),
    (T.scale_by_rms, {}), (T.scale_by_lion, {"mode": "smooth"}), (T.scale_by_amsgrad, {}),
    (T.scale_by_belief, {}), (T.scale_by_yogi, {}), (T.scale_by_radam, {"threshold": 1.0}),
    (T.scale_by_adamax, {}), (T.scale_by_stddev, {"eps": 1e-2}), (T.scale_by_rss, {}),
    (T.scale_by_adadelta, {}), (T.scale_by_novograd, {}), (T.scale_by_adan, {}),
    (T.scale_by_trust_ratio, {}), (T.normalize_by_update_norm, {}),
]


def _two_step_loss(make_tx, kwargs, learning_rate, decay):
    if "b1" in inspect.signature(make_tx).parameters and make_tx is not T.scale_by_lion:
        kwargs = {**kwargs, "b1": decay}
    tx = optax_compat.chain(make_tx(**kwargs), T.scale_by_learning_rate(learning_rate))
    params = make_tree(torch.float64)
    state = tx.init(params)
    for step in range(2):
        grads = optree.tree_map(lambda p, s=step: p * (1.5 + s) + 0.1, params)
        updates, state = tx.update(grads, state, params)
        params = optax_compat.apply_updates(params, updates)
    return sum((x ** 2).sum() for x in optree.tree_leaves(params))


@pytest.mark.parametrize("make_tx, kwargs", DIFFERENTIABLE,
                         ids=[f"{f.__name__}{k}" for f, k in DIFFERENTIABLE])
def test_differentiable_wrt_hyperparameters(make_tx, kwargs):
    learning_rate = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    decay = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    loss = _two_step_loss(make_tx, kwargs, learning_rate, decay)
    grad_lr, grad_decay = torch.autograd.grad(loss, (learning_rate, decay), allow_unused=True)
    h = 1e-6
    with torch.no_grad():
        finite_lr = (_two_step_loss(make_tx, kwargs, learning_rate + h, decay)
                     - _two_step_loss(make_tx, kwargs, learning_rate - h, decay)) / (2 * h)
        finite_decay = (_two_step_loss(make_tx, kwargs, learning_rate, decay + h)
                        - _two_step_loss(make_tx, kwargs, learning_rate, decay - h)) / (2 * h)
    torch.testing.assert_close(grad_lr, finite_lr, rtol=1e-5, atol=1e-7)
    if grad_decay is not None:
        torch.testing.assert_close(grad_decay, finite_decay, rtol=1e-5, atol=1e-7)
    else:
        assert abs(float(finite_decay)) < 1e-7


def test_differentiable_wrt_inputs():
    params = make_tree(torch.float64)
    grads = optree.tree_map(lambda p: p.clone().requires_grad_(), make_tree(torch.float64, 1),
                            none_is_leaf=False)
    tx = T.scale_by_adam(eps_root=1e-8)
    updates, _ = tx.update(grads, tx.init(params), params)
    total = sum(u.sum() for u in optree.tree_leaves(updates))
    leaves = optree.tree_leaves(grads)
    derivatives = torch.autograd.grad(total, leaves)
    # First Adam step: u = g / (|g| + eps) elementwise, so du/dg = eps / (|g| + eps)^2 > 0.
    assert all(torch.all(d > 0) for d in derivatives)


# ----------------------------------------------------------------------------------------------
# Bad input.


NEEDS_PARAMS = ["scale_by_trust_ratio", "scale_by_param_block_norm", "scale_by_param_block_rms",
                "scale_by_novograd", "scale_by_distance_over_gradients"]


@pytest.mark.parametrize("name", NEEDS_PARAMS)
def test_missing_params_names_the_transform(name):
    tx = getattr(T, name)()
    state = tx.init(make_tree())
    with pytest.raises(ValueError, match=name) as info:
        tx.update(make_tree(seed=1), state)
    assert bb.NO_PARAMS_MSG in str(info.value)


# Transforms with neither per-leaf state nor params have nothing to check updates against.
TREE_FREE = {"scale", "scale_by_learning_rate", "scale_by_sign", "centralize",
             "normalize_by_update_norm"}


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in TREE_FREE], ids=_case_id)
def test_mismatched_updates_name_the_path(case):
    name, args, kwargs, _ = case
    tx = getattr(T, name)(*args, **kwargs)
    params = make_tree()
    state = tx.init(params)
    wrong = make_tree(seed=1)
    wrong["layer"]["extra"] = torch.ones(2)
    with pytest.raises(ValueError, match="extra"):
        tx.update(wrong, state, params)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("make_tx", [T.scale_by_adam, T.scale_by_rms, T.scale_by_lion,
                                     T.scale_by_radam])
def test_errors_leave_the_state_untouched(make_tx, inplace):
    tx = make_tx()
    params = make_tree()
    state = tx.init(params)
    _, state = tx.update(make_tree(seed=1), state, params)
    before = _clone(state)
    wrong = make_tree(seed=2)
    wrong["pair"] = (wrong["pair"][0],)
    with pytest.raises(ValueError, match=r"\['pair'\]"):
        tx.update(wrong, state, params, inplace=inplace)
    _assert_equal_trees(state, before)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_integer_leaf_is_a_type_error_naming_the_path(case):
    name, args, kwargs, _ = case
    tx = getattr(T, name)(*args, **kwargs)
    params = make_tree()
    state = tx.init(params)
    updates = make_tree(seed=1)
    updates["layer"]["b"] = torch.arange(4)
    with pytest.raises(TypeError, match=r"\['layer'\]\['b'\].*int64"):
        tx.update(updates, state, params)


def test_bad_options_fail_at_construction():
    with pytest.raises(ValueError, match="lion mode"):
        T.scale_by_lion(mode="soft")
    with pytest.raises(ValueError, match="variant"):
        T.scale_by_polyak(variant="sps-")
    with pytest.raises(TypeError, match="callable"):
        T.scale_by_schedule(0.1)


def test_counters_live_on_the_params_device():
    params = {"w": torch.ones(3, device="meta")}
    for tx in (T.scale_by_adam(), T.scale_by_schedule(lambda c: 1.0), T.apply_every(2)):
        counts = [x for x in optree.tree_leaves(tx.init(params)) if x.dtype == torch.int32]
        assert counts and all(c.device.type == "meta" for c in counts)


def test_python_float_schedule_keeps_float64_precision():
    tx = T.scale_by_schedule(lambda count: 0.1)
    params = {"w": torch.ones(2, dtype=torch.float64)}
    updates, _ = tx.update(params, tx.init(params))
    assert updates["w"].tolist() == [0.1, 0.1]


def test_distance_over_gradients_copies_the_initial_params():
    params = {"w": torch.ones(3)}
    state = T.scale_by_distance_over_gradients().init(params)
    params["w"].add_(1.0)
    assert torch.equal(state.init_params["w"], torch.ones(3))


def _complex_tree(seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(3, 2, dtype=torch.complex64, generator=generator),
            "b": torch.randn(2, dtype=torch.complex64, generator=generator)}


@pytest.mark.parametrize("name", ["scale_by_adam", "scale_by_rms", "scale_by_yogi",
                                  "scale_by_stddev", "scale_by_belief", "scale_by_adan",
                                  "scale_by_trust_ratio", "scale_by_sign"])
def test_complex_updates_match_optax(name):
    compare_with_optax(getattr(T, name)(), lambda: jit_optax(getattr(optax, name)()),
                       torch.float32, steps=4, params=_complex_tree(0),
                       grads=[_complex_tree(i + 1) for i in range(4)])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_backward_through_two_updates(case):
    name, args, kwargs, _ = case
    tx = getattr(T, name)(*args, **kwargs)
    params = optree.tree_map(lambda p: p.requires_grad_(), make_tree(torch.float64),
                             none_is_leaf=False)
    state = tx.init(params)
    total = 0.0
    for seed in (1, 2):
        grads = optree.tree_map(lambda p, s=seed: p * (1.0 + s) + 0.5, params,
                                none_is_leaf=False)
        updates, state = tx.update(grads, state, params)
        total = total + sum((u * u).sum() for u in optree.tree_leaves(updates))
    leaves = optree.tree_leaves(params)
    derivatives = torch.autograd.grad(total, leaves, allow_unused=True)
    assert any(d is not None for d in derivatives)
    assert all(torch.isfinite(d).all() for d in derivatives if d is not None)


@pytest.mark.parametrize(("name", "kwargs"), [
    ("scale_by_sign", {}), ("sign_sgd", {"learning_rate": 0.1}), ("lion", {"learning_rate": 0.1}),
    ("rprop", {"learning_rate": 0.1})])
def test_nan_gradients_stay_nan_through_sign(name, kwargs):
    # torch.sign(nan) is 0, jnp.sign(nan) is nan: a NaN gradient must not become a silent no-op.
    grads = [make_tree(torch.float64, seed=i + 1) for i in range(3)]
    grads[1]["layer"]["w"][0, 1] = float("nan")
    ours = getattr(optax_compat, name)(**kwargs)
    compare_with_optax(ours, lambda: getattr(optax, name)(**kwargs), torch.float64, steps=3,
                       grads=grads)
    assert_inplace_matches_pure(ours, torch.float64, steps=3, grads=grads)


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_apply_every_matches_optax(case, dtype):
    ours, theirs = INNER_CASES[case]
    compare_with_optax(optax_compat.chain(ours(), T.apply_every(3)),
                       lambda: jitted(optax.chain(theirs(), optax.apply_every(3))), dtype,
                       steps=7)
