"""The optimizer aliases against real Optax, plus purity and state-stability properties."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import optree
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import optax_compat
from optax_compat.testing import ATOL, RTOL, compare_with_optax, make_tree, strategies
from tests.conftest import TEST_DEVICE

ALIASES = (
    "adabelief adadelta adafactor adagrad adam adamax adamaxw adamw adan amsgrad fromage lamb "
    "lars lion nadam nadamw noisy_sgd novograd optimistic_adam optimistic_adam_v2 "
    "optimistic_gradient_descent polyak_sgd radam rmsprop rprop sgd sign_sgd signum sm3 yogi"
).split()


def dtype_of(lib: Any, name: str) -> Any:
    """The dtype called ``name`` in the world of ``lib`` (torch for ours, jnp for Optax)."""
    if lib is optax_compat:
        return getattr(torch, name)
    import jax.numpy as jnp

    return getattr(jnp, name)


def matrices_only(params: Any) -> Any:
    """A callable mask selecting leaves of two or more dimensions (works on both worlds)."""
    return optree.tree_map(lambda leaf: leaf.ndim >= 2, params, none_is_leaf=False)


# A mask tree with the structure of ``make_tree``: decay the weights, not the biases.
MASK_TREE = {"bias": False, "layer": {"w": True, "b": False}, "pair": (False, True),
             "empty": None}


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration of an alias, built in both worlds from the same keyword arguments.

    ``kwargs(lib)`` gets ``optax_compat`` or ``optax`` so that schedules and dtypes come from
    the right library.
    """

    name: str
    label: str
    kwargs: Callable[[Any], dict] = lambda lib: {}
    extra_args: Callable[[int], dict] | None = None
    dtypes: tuple[torch.dtype, ...] = (torch.float64,)
    params: Callable[[torch.dtype], Any] | None = None
    rtol: dict[torch.dtype, float] = dataclasses.field(default_factory=dict)
    atol: dict[torch.dtype, float] = dataclasses.field(default_factory=dict)


BOTH = (torch.float32, torch.float64)


def factorable_tree(dtype: torch.dtype) -> dict:
    """A tree whose matrices are big enough for Adafactor to factor them."""
    generator = torch.Generator(TEST_DEVICE).manual_seed(7)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, dtype=dtype, device=TEST_DEVICE)

    return {"w": randn(4, 6), "conv": randn(3, 5, 2), "b": randn(6), "s": randn()}


def decay_schedule(lib: Any) -> Any:
    return lib.exponential_decay(init_value=0.05, transition_steps=2, decay_rate=0.5)


# RAdam's ``rho_t = rho_inf - 2 t b2^t / (1 - b2^t)`` cancels two numbers near 2000 to get one
# near 5: a one-ulp difference in float32 ``b2 ** t`` between XLA and ATen moves the rectifier
# by about 1%. float64 is compared at full precision.
RADAM_FLOAT32_RTOL = {torch.float32: 2e-2}
# A float32 moment of float64 params is compared at float32 precision.
FLOAT32_MOMENT = {torch.float64: 1e-6}
# Schedules return float32 even under x64 (in Optax and here), and fromage turns the learning
# rate into a weight decay ``1 / sqrt(1 + lr**2) - 1`` in float32: one float32 rounding of that
# coefficient (the last bit of a float32 ``pow`` differs between CPUs) times the params lands in
# the float64 updates, which are therefore compared at float32 tolerance.
FLOAT32_DECAY = {"rtol": {torch.float64: RTOL[torch.float32]},
                 "atol": {torch.float64: ATOL[torch.float32]}}


def polyak_value(step: int) -> dict:
    return {"value": torch.tensor(3.0 + step)}


CASES = [
    Case("adabelief", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("adabelief", "nesterov_schedule",
         lambda lib: {"learning_rate": decay_schedule(lib), "nesterov": True}),
    Case("adadelta", "default", lambda lib: {"learning_rate": 0.5}, dtypes=BOTH),
    Case("adadelta", "decay_mask_tree",
         lambda lib: {"learning_rate": 0.5, "weight_decay": 0.1,
                      "weight_decay_mask": MASK_TREE}),
    Case("adadelta", "decay_schedule_no_lr",
         lambda lib: {"weight_decay": decay_schedule(lib), "rho": 0.8, "eps": 1e-4}),
    Case("adafactor", "default", lambda lib: {"learning_rate": 0.1}, params=factorable_tree,
         dtypes=BOTH),
    Case("adafactor", "small_factor_dim", lambda lib: {"min_dim_size_to_factor": 2},
         params=factorable_tree),
    Case("adafactor", "momentum_decay_mask_fn",
         lambda lib: {"learning_rate": decay_schedule(lib), "min_dim_size_to_factor": 3,
                      "momentum": 0.9, "dtype_momentum": dtype_of(lib, "float64"),
                      "weight_decay_rate": 0.01, "weight_decay_mask": matrices_only,
                      "decay_offset": 2},
         dtypes=(torch.float64,), params=factorable_tree),
    Case("adafactor", "unfactored_unclipped",
         lambda lib: {"learning_rate": 0.1, "factored": False, "clipping_threshold": None,
                      "multiply_by_parameter_scale": False, "decay_rate": 0.5}),
    Case("adagrad", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("adagrad", "schedule", lambda lib: {"learning_rate": decay_schedule(lib),
                                            "initial_accumulator_value": 0.5, "eps": 1e-3}),
    Case("adam", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("adam", "nesterov_eps_root",
         lambda lib: {"learning_rate": 0.1, "nesterov": True, "eps_root": 1e-8}),
    Case("adam", "schedule", lambda lib: {"learning_rate": decay_schedule(lib), "b1": 0.5}),
    Case("adam", "mu_dtype",
         lambda lib: {"learning_rate": 0.1, "mu_dtype": dtype_of(lib, "float32")},
         dtypes=(torch.float64,), rtol=FLOAT32_MOMENT),
    Case("adamax", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("adamaxw", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("adamaxw", "mask_tree", lambda lib: {"learning_rate": 0.1, "weight_decay": 0.1,
                                              "mask": MASK_TREE}),
    Case("adamw", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("adamw", "mask_tree", lambda lib: {"learning_rate": 0.1, "weight_decay": 0.1,
                                            "mask": MASK_TREE}),
    Case("adamw", "mask_fn_decay_schedule",
         lambda lib: {"learning_rate": decay_schedule(lib), "mask": matrices_only,
                      "weight_decay": decay_schedule(lib), "nesterov": True}),
    Case("adan", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("adan", "decay_mask", lambda lib: {"learning_rate": 0.1, "weight_decay": 0.1,
                                            "mask": matrices_only, "eps_root": 0.0}),
    Case("amsgrad", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("amsgrad", "no_bias_correction",
         lambda lib: {"learning_rate": 0.1, "bias_correction_mu": False,
                      "bias_correction_nu": False, "eps_root": 1e-6}),
    Case("fromage", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    # The schedule's value is float32 (an int32 count) even for float64 params, and Optax's
    # weight decay ``shrink - 1`` cancels it near one: a float32 ulp of XLA's vs ATen's pow
    # becomes up to ~1e-4 relative in the updates.
    Case("fromage", "schedule", lambda lib: {"learning_rate": decay_schedule(lib),
                                             "min_norm": 1e-3}, **FLOAT32_DECAY),
    Case("lamb", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("lamb", "decay_mask", lambda lib: {"learning_rate": 0.1, "weight_decay": 0.1,
                                            "mask": MASK_TREE}),
    Case("lars", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("lars", "masks_nesterov",
         lambda lib: {"learning_rate": decay_schedule(lib), "weight_decay": 0.1,
                      "weight_decay_mask": MASK_TREE, "trust_ratio_mask": matrices_only,
                      "nesterov": True, "eps": 1e-6}),
    Case("lion", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("lion", "mu_dtype_mask",
         lambda lib: {"learning_rate": 0.1, "mu_dtype": dtype_of(lib, "float32"),
                      "mask": matrices_only, "weight_decay": 0.1},
         dtypes=(torch.float64,), rtol=FLOAT32_MOMENT),
    Case("nadam", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("nadamw", "default", lambda lib: {"learning_rate": 0.1, "weight_decay": 0.1}, dtypes=BOTH),
    Case("novograd", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("novograd", "decay", lambda lib: {"learning_rate": decay_schedule(lib),
                                           "weight_decay": 0.1}),
    Case("optimistic_adam", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("optimistic_adam", "optimism", lambda lib: {"learning_rate": 0.1, "optimism": 0.05}),
    Case("optimistic_adam_v2", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("optimistic_adam_v2", "schedule",
         lambda lib: {"learning_rate": decay_schedule(lib), "alpha": 0.5, "beta": 2.0,
                      "nesterov": False}),
    Case("optimistic_gradient_descent", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("optimistic_gradient_descent", "alpha_beta",
         lambda lib: {"learning_rate": 0.1, "alpha": 0.5, "beta": 2.0}),
    Case("polyak_sgd", "default", extra_args=polyak_value, dtypes=BOTH),
    Case("polyak_sgd", "sps_plus",
         lambda lib: {"max_learning_rate": 0.3, "scaling": decay_schedule(lib), "f_min": 4.0,
                      "eps": 1e-3, "variant": "sps+"},
         extra_args=polyak_value),
    Case("radam", "default", lambda lib: {"learning_rate": 0.1}, rtol=RADAM_FLOAT32_RTOL,
         dtypes=BOTH),
    Case("radam", "low_threshold_nesterov",
         lambda lib: {"learning_rate": 0.1, "threshold": 1.0, "nesterov": True}),
    Case("rmsprop", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("rmsprop", "centered_momentum",
         lambda lib: {"learning_rate": 0.1, "centered": True, "momentum": 0.9,
                      "nesterov": True, "initial_scale": 0.1}),
    Case("rmsprop", "eps_outside_bias_correction",
         lambda lib: {"learning_rate": decay_schedule(lib), "eps_in_sqrt": False,
                      "bias_correction": True, "momentum": 0.5}),
    Case("rprop", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("rprop", "bounds", lambda lib: {"learning_rate": 0.1, "eta_minus": 0.3,
                                         "eta_plus": 1.5, "min_step_size": 0.05,
                                         "max_step_size": 0.2}),
    Case("sgd", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("sgd", "nesterov_schedule",
         lambda lib: {"learning_rate": decay_schedule(lib), "momentum": 0.9, "nesterov": True}),
    Case("sgd", "accumulator_dtype",
         lambda lib: {"learning_rate": 0.1, "momentum": 0.9,
                      "accumulator_dtype": dtype_of(lib, "float32")},
         dtypes=(torch.float64,), rtol=FLOAT32_MOMENT),
    Case("sign_sgd", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("signum", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("signum", "accumulator_dtype",
         lambda lib: {"learning_rate": 0.1, "beta": 0.5,
                      "accumulator_dtype": dtype_of(lib, "float32")},
         dtypes=(torch.float64,), rtol=FLOAT32_MOMENT),
    # SM3 needs params of rank >= 1 (Optax fails on 0-d leaves too).
    Case("sm3", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH,
         params=lambda dtype: {k: v for k, v in factorable_tree(dtype).items() if k != "s"}),
    Case("sm3", "momentum", lambda lib: {"learning_rate": 0.1, "momentum": 0.5},
         params=lambda dtype: {k: v for k, v in factorable_tree(dtype).items() if k != "s"}),
    Case("yogi", "default", lambda lib: {"learning_rate": 0.1}, dtypes=BOTH),
    Case("yogi", "eps", lambda lib: {"learning_rate": 0.1, "b1": 0.5, "eps": 1e-2}),
]

ORACLE_PARAMS = [pytest.param(case, dtype, id=f"{case.name}-{case.label}-{str(dtype)[6:]}")
                 for case in CASES for dtype in case.dtypes]


@pytest.mark.parametrize(("case", "dtype"), ORACLE_PARAMS)
def test_matches_optax(case: Case, dtype: torch.dtype) -> None:
    import optax

    params = case.params(dtype) if case.params else make_tree(dtype)
    grads = [make_tree(dtype, seed=step + 1) for step in range(6)]
    if case.params:
        grads = [optree.tree_map(lambda p, s=step: p * (1.5 - 0.4 * s) + 0.1, params)
                 for step in range(6)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ours = getattr(optax_compat, case.name)(**case.kwargs(optax_compat))
        compare_with_optax(ours, lambda: getattr(optax, case.name)(**case.kwargs(optax)),
                           dtype, steps=len(grads), params=params, grads=grads,
                           extra_args=case.extra_args, rtol=case.rtol, atol=case.atol)


def test_every_alias_has_an_oracle_case() -> None:
    assert sorted({case.name for case in CASES} | {"noisy_sgd"}) == sorted(ALIASES)


@pytest.mark.parametrize("name", ALIASES)
def test_signature_matches_optax(name: str) -> None:
    import optax

    ours = inspect.signature(getattr(optax_compat, name))
    theirs = inspect.signature(getattr(optax, name))
    assert list(ours.parameters) == list(theirs.parameters)
    for param_name, theirs_param in theirs.parameters.items():
        ours_param = ours.parameters[param_name]
        assert ours_param.kind == theirs_param.kind, param_name
        if theirs_param.default is not inspect.Parameter.empty and param_name != "dtype_momentum":
            assert ours_param.default == theirs_param.default, param_name


def test_nadam_is_adam_with_nesterov() -> None:
    assert optax_compat.nadam.func is optax_compat.adam
    assert optax_compat.nadam.keywords == {"nesterov": True}
    assert optax_compat.nadamw.func is optax_compat.adamw
    assert optax_compat.nadamw.keywords == {"nesterov": True}


def test_adafactor_momentum_dtype_defaults_to_float32() -> None:
    tx = optax_compat.adafactor(learning_rate=0.1, momentum=0.9)
    params = {"w": torch.zeros(3, 4, dtype=torch.float64)}
    state = tx.init(params)
    dtypes = {leaf.dtype for leaf in optree.tree_leaves(state, none_is_leaf=False)
              if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.ndim}
    assert torch.float32 in dtypes


def test_optimistic_adam_rejects_schedules_and_warns() -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="schedules"):
        optax_compat.optimistic_adam(lambda count: 0.1)


def test_polyak_sgd_requires_value() -> None:
    tx = optax_compat.polyak_sgd()
    params = make_tree(torch.float64)
    with pytest.raises(TypeError, match="value"):
        tx.update(make_tree(torch.float64, seed=1), tx.init(params), params)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("key", [3, torch.Generator().manual_seed(3)], ids=["int", "generator"])
def test_noisy_sgd_noise_statistics(dtype: torch.dtype, key: Any) -> None:
    # With zero gradients the update is -lr * noise, whose variance is eta / (1 + t) ** gamma.
    learning_rate, eta, gamma, size = 0.5, 0.04, 0.55, 200_000
    tx = optax_compat.noisy_sgd(learning_rate, eta=eta, gamma=gamma, key=key)
    params = {"a": torch.zeros(size // 2, dtype=dtype), "b": torch.zeros(2, size // 4, dtype=dtype)}
    grads = optree.tree_map(torch.zeros_like, params)
    state = tx.init(params)
    previous = None
    for step in range(3):
        updates, state = tx.update(grads, state, params)
        noise = torch.cat([leaf.reshape(-1) for leaf in optree.tree_leaves(updates)])
        noise = noise.double() / -learning_rate
        assert updates["a"].dtype == dtype
        expected_variance = eta / (1 + step) ** gamma
        standard_error = (expected_variance / size) ** 0.5
        assert abs(noise.mean().item()) < 5 * standard_error
        # The sample variance of n normals has relative standard deviation sqrt(2 / n).
        assert noise.var().item() == pytest.approx(expected_variance, rel=5 * (2 / size) ** 0.5)
        if previous is not None:  # a fresh draw at every step
            assert not torch.equal(noise, previous)
        previous = noise


def test_noisy_sgd_is_reproducible_from_the_seed() -> None:
    params = make_tree(torch.float64)
    grads = make_tree(torch.float64, seed=1)

    def run(key: Any) -> list[np.ndarray]:
        tx = optax_compat.noisy_sgd(0.1, key=key)
        state = tx.init(params)
        out = []
        for _ in range(2):
            updates, state = tx.update(grads, state, params)
            out.extend(leaf.cpu().numpy() for leaf in optree.tree_leaves(updates))
        return out

    for first, second in zip(run(5), run(5), strict=True):
        np.testing.assert_array_equal(first, second)
    assert any(not np.array_equal(a, b) for a, b in zip(run(5), run(6), strict=True))


# ----------------------------------------------------------------------------------------------
# Properties on random trees and hyperparameters.

# Each alias with hyperparameters drawn by hypothesis (``draw`` is ``data.draw``).
PROPERTY_BUILDERS: dict[str, Callable[[Callable], Any]] = {
    "adabelief": lambda d: optax_compat.adabelief(
        d(st.floats(1e-4, 1.0)), nesterov=d(st.booleans())),
    "adadelta": lambda d: optax_compat.adadelta(
        d(st.floats(1e-3, 1.0)), weight_decay=d(st.floats(0.0, 0.1))),
    "adafactor": lambda d: optax_compat.adafactor(
        d(st.floats(1e-4, 1.0)), min_dim_size_to_factor=d(st.integers(1, 3)),
        momentum=d(st.none() | st.floats(0.0, 0.99)),
        weight_decay_rate=d(st.none() | st.floats(0.0, 0.1))),
    "adagrad": lambda d: optax_compat.adagrad(d(st.floats(1e-4, 1.0))),
    "adam": lambda d: optax_compat.adam(
        d(st.floats(1e-4, 1.0)), b1=d(st.floats(0.0, 0.99)), nesterov=d(st.booleans())),
    "adamax": lambda d: optax_compat.adamax(d(st.floats(1e-4, 1.0))),
    "adamaxw": lambda d: optax_compat.adamaxw(d(st.floats(1e-4, 1.0)),
                                              weight_decay=d(st.floats(0.0, 0.1))),
    "adamw": lambda d: optax_compat.adamw(
        d(st.floats(1e-4, 1.0)), weight_decay=d(st.floats(0.0, 0.1)),
        mask=d(st.sampled_from([None, matrices_only]))),
    "adan": lambda d: optax_compat.adan(d(st.floats(1e-4, 1.0)),
                                        weight_decay=d(st.floats(0.0, 0.1))),
    "amsgrad": lambda d: optax_compat.amsgrad(d(st.floats(1e-4, 1.0))),
    "fromage": lambda d: optax_compat.fromage(d(st.floats(1e-4, 1.0))),
    "lamb": lambda d: optax_compat.lamb(d(st.floats(1e-4, 1.0)),
                                        weight_decay=d(st.floats(0.0, 0.1))),
    "lars": lambda d: optax_compat.lars(
        d(st.floats(1e-4, 1.0)), weight_decay=d(st.floats(0.0, 0.1)),
        trust_ratio_mask=d(st.sampled_from([True, matrices_only]))),
    "lion": lambda d: optax_compat.lion(d(st.floats(1e-4, 1.0)),
                                        weight_decay=d(st.floats(0.0, 0.1))),
    "nadam": lambda d: optax_compat.nadam(d(st.floats(1e-4, 1.0))),
    "nadamw": lambda d: optax_compat.nadamw(d(st.floats(1e-4, 1.0))),
    "noisy_sgd": lambda d: optax_compat.noisy_sgd(
        d(st.floats(1e-4, 1.0)), key=d(st.integers(0, 2 ** 31 - 1))),
    "novograd": lambda d: optax_compat.novograd(d(st.floats(1e-4, 1.0)),
                                                weight_decay=d(st.floats(0.0, 0.1))),
    "optimistic_adam": lambda d: optax_compat.optimistic_adam(d(st.floats(1e-4, 1.0))),
    "optimistic_adam_v2": lambda d: optax_compat.optimistic_adam_v2(
        d(st.floats(1e-4, 1.0)), alpha=d(st.floats(0.1, 2.0)), beta=d(st.floats(0.1, 2.0))),
    "optimistic_gradient_descent": lambda d: optax_compat.optimistic_gradient_descent(
        d(st.floats(1e-4, 1.0))),
    "polyak_sgd": lambda d: optax_compat.polyak_sgd(
        max_learning_rate=d(st.floats(1e-3, 1.0)), variant=d(st.sampled_from(["sps", "sps+"]))),
    "radam": lambda d: optax_compat.radam(d(st.floats(1e-4, 1.0)),
                                          threshold=d(st.floats(0.0, 6.0))),
    "rmsprop": lambda d: optax_compat.rmsprop(
        d(st.floats(1e-4, 1.0)), centered=d(st.booleans()),
        momentum=d(st.none() | st.floats(0.0, 0.99))),
    "rprop": lambda d: optax_compat.rprop(d(st.floats(1e-4, 1.0))),
    "sgd": lambda d: optax_compat.sgd(
        d(st.floats(1e-4, 1.0)), momentum=d(st.none() | st.floats(0.0, 0.99)),
        nesterov=d(st.booleans())),
    "sign_sgd": lambda d: optax_compat.sign_sgd(d(st.floats(1e-4, 1.0))),
    "signum": lambda d: optax_compat.signum(d(st.floats(1e-4, 1.0)),
                                            beta=d(st.floats(0.0, 0.99))),
    "sm3": lambda d: optax_compat.sm3(d(st.floats(1e-4, 1.0))),
    "yogi": lambda d: optax_compat.yogi(d(st.floats(1e-4, 1.0))),
}


def test_every_alias_has_a_property_builder() -> None:
    assert sorted(PROPERTY_BUILDERS) == sorted(ALIASES)


def _snapshot(tree: Any) -> tuple[Any, list[tuple[torch.Tensor, torch.Tensor, int]]]:
    leaves, spec = optree.tree_flatten(tree, none_is_leaf=False)
    return spec, [(leaf, leaf.clone(), leaf._version) for leaf in leaves
                  if isinstance(leaf, torch.Tensor)]


def _assert_unchanged(tree: Any, snapshot: Any, what: str) -> None:
    spec, records = snapshot
    assert optree.tree_structure(tree, none_is_leaf=False) == spec, f"{what}: structure changed"
    for leaf, copy, version in records:
        assert leaf._version == version, f"{what} was written in place"
        same = (leaf == copy) | ((leaf != leaf) & (copy != copy))  # NaN equals NaN here
        assert bool(same.all()), f"{what} changed value"


def _signature(state: Any) -> tuple[Any, list[tuple]]:
    leaves, spec = optree.tree_flatten(state, none_is_leaf=False)
    return spec, [(tuple(leaf.shape), leaf.dtype) if isinstance(leaf, torch.Tensor)
                  else type(leaf) for leaf in leaves]


@pytest.mark.parametrize("name", ALIASES)
@settings(max_examples=15)
@given(data=st.data())
def test_state_stable_and_inputs_untouched(name: str, data: st.DataObject) -> None:
    # SM3 keeps one accumulator per axis and rejects 0-d params (as Optax fails on them).
    shapes = hnp.array_shapes(min_dims=1 if name == "sm3" else 0, max_dims=2, max_side=3)
    params, grads = data.draw(strategies.params_and_grads(
        steps=3, min_value=-3.0, max_value=3.0, dtypes=(torch.float32, torch.float64),
        shapes=shapes))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tx = PROPERTY_BUILDERS[name](data.draw)
    extra = {"value": torch.tensor(2.0)} if name == "polyak_sgd" else {}
    params_snapshot = _snapshot(params)
    state = tx.init(params)
    _assert_unchanged(params, params_snapshot, "init: params")
    expected = _signature(state)
    for grad in grads:
        inputs = [(grad, _snapshot(grad), "updates"), (state, _snapshot(state), "state"),
                  (params, _snapshot(params), "params")]
        updates, new_state = tx.update(grad, state, params, **extra)
        for tree, snapshot, what in inputs:
            _assert_unchanged(tree, snapshot, f"update: {what}")
        assert _signature(new_state) == expected
        assert optree.tree_structure(updates, none_is_leaf=False) == optree.tree_structure(
            grad, none_is_leaf=False)
        params, state = optax_compat.apply_updates(params, updates), new_state


@pytest.mark.parametrize("name", ALIASES)
def test_inplace_update_gives_the_pure_updates_and_states(name: str,
                                                          device: torch.device) -> None:
    """``inplace=True`` hands the gradients' buffers over, and nothing else (SM3 returns its
    new momentum as its update, which the alias's in-place ``scale`` once scaled inside the
    state)."""
    generator = torch.Generator(device).manual_seed(0)

    def tree() -> dict[str, torch.Tensor]:
        return {"w": torch.randn(3, 4, generator=generator, dtype=torch.float64, device=device),
                "b": torch.randn(5, generator=generator, dtype=torch.float64, device=device)}

    params, grads = tree(), [tree() for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tx = optax_compat.polyak_sgd() if name == "polyak_sgd" else getattr(
            optax_compat, name)(0.1)
    extra = {"value": torch.tensor(2.0)} if name == "polyak_sgd" else {}
    pure_state = inplace_state = tx.init(params)
    for grad in grads:
        pure_updates, pure_state = tx.update(grad, pure_state, params, **extra)
        inplace_updates, inplace_state = tx.update(
            {key: value.clone() for key, value in grad.items()}, inplace_state, params,
            inplace=True, **extra)
        optax_compat.testing.assert_trees_all_close(inplace_updates, pure_updates)
        optax_compat.testing.assert_trees_all_close(inplace_state, pure_state)


# ----------------------------------------------------------------------------------------------
# Sparse gradients (nn.Embedding(..., sparse=True)): Optax has none.

# Aliases whose arithmetic also runs on a sparse gradient (a scale): they keep taking it.
TAKE_SPARSE = ("sgd",)
# Aliases whose arithmetic runs on a sparse gradient where ATen has the kernels: Polyak's step
# size takes the gradient's squared norm, and ``linalg_vector_norm`` runs on sparse tensors
# from torch 2.14 on. On an earlier torch they are refused like the others.
TAKE_SPARSE_WHERE_ATEN_DOES = ("polyak_sgd",)


@pytest.mark.parametrize("name", ALIASES)
def test_a_sparse_gradient_is_refused_by_path_or_taken(name: str, device: torch.device) -> None:
    generator = torch.Generator(device).manual_seed(0)
    params = {"emb": torch.randn(4, 3, generator=generator, device=device), "b": torch.randn(3)}
    sparse = torch.sparse_coo_tensor([[0, 2, 0]], torch.ones(3, 3), (4, 3))  # uncoalesced
    grads = {"emb": sparse, "b": torch.ones(3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tx = optax_compat.polyak_sgd() if name == "polyak_sgd" else getattr(
            optax_compat, name)(0.1)
    extra = {"value": torch.tensor(2.0)} if name == "polyak_sgd" else {}
    state = tx.init(params)
    refusal = pytest.raises(TypeError, match=r"updates\['emb'\] is a sparse tensor.*to_dense"
                                             r".*torch\.optim\.SparseAdam")
    if name not in TAKE_SPARSE + TAKE_SPARSE_WHERE_ATEN_DOES:
        with refusal:
            tx.update(grads, state, params, **extra)
        return
    if name in TAKE_SPARSE_WHERE_ATEN_DOES:
        try:
            torch.linalg.vector_norm(sparse)
        except (NotImplementedError, RuntimeError):  # this torch's ATen has no sparse kernel
            with refusal:
                tx.update(grads, state, params, **extra)
            return
    updates, _ = tx.update(grads, state, params, **extra)
    dense_updates, _ = tx.update({**grads, "emb": sparse.to_dense()}, state, params, **extra)
    optax_compat.testing.assert_trees_all_close(
        optax_compat.apply_updates(params, updates),
        optax_compat.apply_updates(params, dense_updates))
