"""The ``optax_compat.contrib`` optimizers against real Optax from one case table, step by step,
plus purity and gradients.

Covers the modules ``_acprop``, ``_ademamix`` (ademamix, simplified_ademamix), ``_adopt``,
``_cocob``, ``_dadapt_adamw``, ``_dog`` (dog, dowg), ``_madgrad``, ``_prodigy`` (with their
``scale_by_*`` transforms) and ``_complex_valued`` (split_real_and_imaginary). The other contrib
modules have a test file each (``test_contrib_<module>.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import optree
import pytest
import torch

import optax_compat
from optax_compat.testing import compare_with_optax, jit_optax, make_tree

MODULES = {
    "acprop": "_acprop", "scale_by_acprop": "_acprop",
    "ademamix": "_ademamix", "scale_by_ademamix": "_ademamix",
    "simplified_ademamix": "_ademamix", "scale_by_simplified_ademamix": "_ademamix",
    "adopt": "_adopt", "scale_by_adopt": "_adopt",
    "cocob": "_cocob", "scale_by_cocob": "_cocob",
    "split_real_and_imaginary": "_complex_valued",
    "dadapt_adamw": "_dadapt_adamw",
    "dog": "_dog", "dowg": "_dog",
    "madgrad": "_madgrad", "scale_by_madgrad": "_madgrad",
    "prodigy": "_prodigy",
}
STATES = {
    "ScaleByAdemamixState": "_ademamix", "ScaleBySimplifiedAdEMAMixState": "_ademamix",
    "COCOBState": "_cocob", "SplitRealAndImaginaryState": "_complex_valued",
    "DAdaptAdamWState": "_dadapt_adamw", "DoGState": "_dog", "DoWGState": "_dog",
    "MadgradState": "_madgrad", "ProdigyState": "_prodigy",
}


def ours(name: str) -> Any:
    """The object ``name`` from its private ``optax_compat.contrib`` module."""
    module = MODULES.get(name) or STATES[name]
    return getattr(importlib.import_module(f"optax_compat.contrib.{module}"), name)


def theirs(name: str) -> Any:
    import optax

    return getattr(optax.contrib, name)


def dtype_of(lib: Any, name: str) -> Any:
    """The dtype called ``name`` in the world of ``lib`` (torch for ours, jnp for Optax)."""
    if lib is optax_compat:
        return getattr(torch, name)
    import jax.numpy as jnp

    return getattr(jnp, name)


def schedule(lib: Any) -> Any:
    return lib.exponential_decay(init_value=0.05, transition_steps=2, decay_rate=0.5)


def rising(lib: Any, start: float, end: float) -> Any:
    """A linear warmup, as used for AdEMAMix's ``b3`` and ``alpha``."""
    return lib.linear_schedule(init_value=start, end_value=end, transition_steps=4)


def matrices_only(params: Any) -> Any:
    """A callable mask selecting leaves of two or more dimensions (works on both worlds)."""
    return optree.tree_map(lambda leaf: leaf.ndim >= 2, params, none_is_leaf=False)


MASK_TREE = {"bias": False, "layer": {"w": True, "b": False}, "pair": (False, True),
             "empty": None}
BOTH = (torch.float32, torch.float64)


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration, built in both worlds from ``kwargs(lib)`` (``lib`` is the library)."""

    name: str
    label: str
    kwargs: Callable[[Any], dict] = lambda lib: {}
    dtypes: tuple[torch.dtype, ...] = (torch.float64,)
    # XLA's fused float32 schedule values differ from eager ones by an ulp, which the float64
    # comparison of MADGRAD (whose step is the float32 schedule value) would see.
    jit: bool = True


CASES = [
    Case("acprop", "default", lambda lib: {"learning_rate": 0.1}, BOTH),
    Case("acprop", "decay_mask_schedule",
         lambda lib: {"learning_rate": schedule(lib), "b1": 0.5, "eps": 1e-8,
                      "eps_root": 1e-10, "weight_decay": 0.1, "mask": MASK_TREE}),
    Case("scale_by_acprop", "default", dtypes=BOTH),
    Case("ademamix", "default", lambda lib: {"learning_rate": 0.1}, BOTH),
    Case("ademamix", "scheduled_b3_alpha_decay",
         lambda lib: {"learning_rate": schedule(lib), "b3": rising(lib, 0.9, 0.999),
                      "alpha": rising(lib, 0.0, 8.0), "eps_root": 1e-8,
                      "weight_decay": 0.1, "mask": matrices_only}, BOTH),
    Case("ademamix", "mu_dtype",
         lambda lib: {"learning_rate": 0.1, "mu_dtype": dtype_of(lib, "float16"),
                      "b1": 0.5}, (torch.float32,)),
    Case("scale_by_ademamix", "default", dtypes=BOTH),
    Case("simplified_ademamix", "default", lambda lib: {"learning_rate": 0.1}, BOTH),
    Case("simplified_ademamix", "scheduled_alpha_decay",
         lambda lib: {"learning_rate": schedule(lib), "alpha": rising(lib, 1.0, 5.0),
                      "b1": 0.9, "b2": 0.99, "eps_root": 1e-8, "weight_decay": 0.1,
                      "mask": MASK_TREE}, BOTH),
    Case("scale_by_simplified_ademamix", "alpha",
         lambda lib: {"alpha": 2.0, "eps": 1e-6}),
    Case("adopt", "default", lambda lib: {"learning_rate": 0.1}, BOTH),
    Case("adopt", "nesterov_unclipped_schedule",
         lambda lib: {"learning_rate": schedule(lib), "nesterov": True,
                      "use_clipping": False, "b2": 0.9}, BOTH),
    Case("adopt", "nesterov_clip_fn_mu_dtype",
         lambda lib: {"learning_rate": 0.1, "nesterov": True, "b1": 0.8,
                      "clip_value_fn": lambda count: 0.5 + count**0.5,
                      "mu_dtype": dtype_of(lib, "float16")},
         (torch.float32,)),
    Case("scale_by_adopt", "default", dtypes=BOTH),
    Case("cocob", "default", dtypes=BOTH),
    Case("cocob", "decay_mask_schedule",
         lambda lib: {"learning_rate": schedule(lib), "alpha": 10.0, "eps": 1e-3,
                      "weight_decay": 0.01, "mask": MASK_TREE}, BOTH),
    Case("scale_by_cocob", "alpha", lambda lib: {"alpha": 5.0}),
    Case("dadapt_adamw", "default", lambda lib: {"learning_rate": 0.1}, BOTH),
    Case("dadapt_adamw", "schedule_decay",
         lambda lib: {"learning_rate": rising(lib, 0.2, 1.0), "betas": (0.8, 0.99),
                      "eps": 1e-6, "estim_lr0": 1e-3, "weight_decay": 0.1}, BOTH),
    Case("dog", "default", dtypes=BOTH),
    Case("dog", "distance_decay_mask",
         lambda lib: {"learning_rate": schedule(lib), "init_step": ("distance", 0.1),
                      "weight_decay": 0.1, "mask": matrices_only}, BOTH),
    Case("dog", "learning_rate", lambda lib: {"init_step": ("learning_rate", 0.05),
                                              "eps": 1e-4}, BOTH),
    Case("dowg", "default", dtypes=BOTH),
    Case("dowg", "init_dist_decay",
         lambda lib: {"learning_rate": 0.5, "init_estim_sq_dist": 0.1, "eps": 1e-6,
                      "weight_decay": 0.1, "mask": MASK_TREE}, BOTH),
    Case("madgrad", "default", lambda lib: {"learning_rate": 0.1}, BOTH),
    Case("madgrad", "schedule_decay",
         lambda lib: {"learning_rate": schedule(lib), "momentum": 0.5,
                      "weight_decay": 0.1, "eps": 1e-4}, BOTH, jit=False),
    # A weakly typed float64 schedule value meets the float32 ``sqrt(count + 1)``: float32.
    Case("madgrad", "weak_schedule",
         lambda lib: {"learning_rate": lib.cosine_decay_schedule(0.3, 9, alpha=0.5)}, BOTH,
         jit=False),
    # A strongly typed float64 one (a one-cycle piece's) keeps float64 in 64-bit mode.
    Case("madgrad", "strong_schedule",
         lambda lib: {"learning_rate": lib.join_schedules(
             [lib.linear_onecycle_schedule(10, 0.306, 0.5, div_factor=10),
              lib.constant_schedule(0.05)], [5])}, BOTH, jit=False),
    Case("scale_by_madgrad", "default", lambda lib: {"learning_rate": 0.05}),
    Case("prodigy", "default", lambda lib: {"learning_rate": 0.1}, BOTH),
    Case("prodigy", "beta3_coef_decay_schedule",
         lambda lib: {"learning_rate": rising(lib, 0.2, 1.0), "beta3": 0.9,
                      "estim_lr0": 1e-3, "estim_lr_coef": 2.0, "weight_decay": 0.1}, BOTH),
    Case("prodigy", "safeguard_warmup",
         lambda lib: {"learning_rate": rising(lib, 0.2, 1.0), "safeguard_warmup": True,
                      "betas": (0.8, 0.99)}, BOTH),
]
STEPS = 6


def case_params(cases: list[Case]) -> list:
    return [pytest.param(case, dtype, id=f"{case.name}-{case.label}-{str(dtype)[6:]}")
            for case in cases for dtype in case.dtypes]


def grads_for(dtype: torch.dtype) -> list:
    return [make_tree(dtype, seed=step + 1) for step in range(STEPS)]


@pytest.mark.parametrize(("case", "dtype"), case_params(CASES))
def test_matches_optax(case: Case, dtype: torch.dtype) -> None:
    import optax

    tx = ours(case.name)(**case.kwargs(optax_compat))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # float16 moments in JAX
        wrap = jit_optax if case.jit else (lambda tx: tx)
        compare_with_optax(tx, lambda: wrap(theirs(case.name)(**case.kwargs(optax))),
                           dtype, steps=STEPS, grads=grads_for(dtype))


def test_every_name_has_an_oracle_case() -> None:
    covered = {case.name for case in CASES} | {"split_real_and_imaginary"}
    assert covered == set(MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_signature_matches_optax(name: str) -> None:
    ours_signature = inspect.signature(ours(name))
    theirs_signature = inspect.signature(theirs(name))
    assert list(ours_signature.parameters) == list(theirs_signature.parameters)
    for param_name, theirs_param in theirs_signature.parameters.items():
        ours_param = ours_signature.parameters[param_name]
        assert ours_param.kind == theirs_param.kind, param_name
        if not callable(theirs_param.default):
            assert ours_param.default == theirs_param.default, param_name


@pytest.mark.parametrize("name", sorted(STATES))
def test_state_fields_match_optax(name: str) -> None:
    assert ours(name)._fields == theirs(name)._fields


# ----------------------------------------------------------------------------------------------
# Complex params.


def complex_tree(dtype: torch.dtype, seed: int) -> dict:
    """A tree with complex leaves (one 0-d), a real leaf and a None subtree."""
    generator = torch.Generator().manual_seed(seed)
    complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64

    def rand(*shape: int, kind: torch.dtype = complex_dtype) -> torch.Tensor:
        return torch.randn(shape, generator=generator, dtype=kind)

    return {"z": rand(3, 2), "scalar": rand(), "real": rand(4, kind=dtype), "empty": None}


SPLIT_INNER = [
    ("scale_by_adam", lambda lib: lib.scale_by_adam()),
    ("ademamix", lambda lib: lib.contrib.ademamix(0.1) if lib is not optax_compat
     else ours("ademamix")(0.1)),
    ("cocob", lambda lib: lib.contrib.cocob() if lib is not optax_compat else ours("cocob")()),
]


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize(("label", "inner"), SPLIT_INNER, ids=[label for label, _ in SPLIT_INNER])
def test_split_real_and_imaginary_matches_optax(label: str, inner: Callable,
                                                dtype: torch.dtype) -> None:
    import optax

    del label
    tx = ours("split_real_and_imaginary")(inner(optax_compat))
    compare_with_optax(
        tx, lambda: jit_optax(theirs("split_real_and_imaginary")(inner(optax))),
        dtype, steps=4, params=complex_tree(dtype, 0),
        grads=[complex_tree(dtype, step + 1) for step in range(4)])


# These also take complex params directly, as in Optax. (ADOPT and MADGRAD reject them in both
# libraries; COCOB, D-Adaptation and Prodigy only run in Optax through JAX's lexicographic
# maximum of complex numbers, which torch refuses: wrap them in split_real_and_imaginary.)
COMPLEX_DIRECT = [("acprop", {"learning_rate": 0.1}), ("ademamix", {"learning_rate": 0.1}),
                  ("simplified_ademamix", {"learning_rate": 0.1}), ("dog", {}), ("dowg", {})]


@pytest.mark.parametrize(("name", "kwargs"), COMPLEX_DIRECT, ids=[n for n, _ in COMPLEX_DIRECT])
def test_complex_params_match_optax(name: str, kwargs: dict) -> None:
    dtype = torch.float64
    compare_with_optax(ours(name)(**kwargs), lambda: jit_optax(theirs(name)(**kwargs)),
                       dtype, steps=3, params=complex_tree(dtype, 0),
                       grads=[complex_tree(dtype, step + 1) for step in range(3)])


def test_split_real_and_imaginary_equals_optimising_the_pair() -> None:
    """On ``z = x + iy`` the wrapped optimizer moves ``x`` and ``y`` as on two real params."""
    x = torch.tensor([[0.1, 0.2, 0.3], [-0.1, -0.2, -0.3]], dtype=torch.float64)
    y = torch.tensor([[0.5, -0.5, 0.0], [0.1, 0.3, -0.2]], dtype=torch.float64)
    z = torch.complex(x, y)
    real_tx = optax_compat.scale_by_adam()
    complex_tx = ours("split_real_and_imaginary")(optax_compat.scale_by_adam())
    real_state, complex_state = real_tx.init((x, y)), complex_tx.init(z)
    for _ in range(3):
        gx, gy = torch.func.grad(lambda p: (p[0] ** 2 + p[1] ** 2).sum())((x, y))
        # PyTorch's gradient of a real loss in a complex z is already gx + i gy.
        z_leaf = z.clone().requires_grad_(True)
        (z_leaf.conj() * z_leaf).real.sum().backward()
        torch.testing.assert_close(z_leaf.grad, torch.complex(gx, gy))
        (ux, uy), real_state = real_tx.update((gx, gy), real_state)
        uz, complex_state = complex_tx.update(z_leaf.grad, complex_state)
        x, y, z = x + ux, y + uy, z + uz
        torch.testing.assert_close(z, torch.complex(x, y), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# Purity, errors, gradients.

ALIAS_FACTORIES = {
    "acprop": lambda: ours("acprop")(0.1, weight_decay=0.1),
    "ademamix": lambda: ours("ademamix")(0.1, b3=rising(optax_compat, 0.9, 0.99)),
    "simplified_ademamix": lambda: ours("simplified_ademamix")(0.1, alpha=1.0),
    "adopt": lambda: ours("adopt")(0.1, nesterov=True),
    "cocob": lambda: ours("cocob")(weight_decay=0.1),
    "dadapt_adamw": lambda: ours("dadapt_adamw")(weight_decay=0.1),
    "dog": lambda: ours("dog")(weight_decay=0.1),
    "dowg": lambda: ours("dowg")(),
    "madgrad": lambda: ours("madgrad")(0.1, weight_decay=0.1),
    "prodigy": lambda: ours("prodigy")(weight_decay=0.1),
    "split_real_and_imaginary": lambda: ours("split_real_and_imaginary")(
        optax_compat.scale_by_adam()),
}


def _clone(tree: Any) -> Any:
    return optree.tree_map(torch.clone, tree, none_is_leaf=False)


def _assert_equal_trees(a: Any, b: Any) -> None:
    a_leaves, a_spec = optree.tree_flatten(a, none_is_leaf=False)
    b_leaves, b_spec = optree.tree_flatten(b, none_is_leaf=False)
    assert a_spec == b_spec
    assert all(torch.equal(x, y) for x, y in zip(a_leaves, b_leaves))


@pytest.mark.parametrize("name", sorted(ALIAS_FACTORIES))
def test_update_is_pure(name: str) -> None:
    tx = ALIAS_FACTORIES[name]()
    params = make_tree(torch.float64, seed=0)
    state = tx.init(params)
    for step in range(3):
        grads = make_tree(torch.float64, seed=step + 1)
        inputs = _clone((grads, state, params))
        updates, new_state = tx.update(grads, state, params)
        _assert_equal_trees((grads, state, params), inputs)
        params = optax_compat.apply_updates(params, updates)
        state = new_state


@pytest.mark.parametrize("name", ["cocob", "dadapt_adamw", "dog", "dowg", "madgrad", "prodigy"])
def test_state_does_not_alias_the_initial_params(name: str) -> None:
    """A copy of the initial params is kept: writing into the params later must not move it."""
    tx = ALIAS_FACTORIES[name]()
    params = make_tree(torch.float64, seed=0)
    state = tx.init(params)
    before = _clone(state)
    for leaf in optree.tree_leaves(params, none_is_leaf=False):
        leaf.add_(1.0)
    _assert_equal_trees(state, before)


@pytest.mark.parametrize("name", ["cocob", "dadapt_adamw", "dog", "dowg", "madgrad", "prodigy"])
def test_missing_params_names_the_transformation(name: str) -> None:
    tx = ALIAS_FACTORIES[name]()
    params = make_tree(torch.float32)
    with pytest.raises(ValueError, match="params"):
        tx.update(make_tree(torch.float32, seed=1), tx.init(params))


def test_state_mismatch_names_the_path() -> None:
    tx = ours("ademamix")(0.1)
    state = tx.init({"a": torch.zeros(2), "b": torch.zeros(3)})
    with pytest.raises(ValueError, match="'c'"):
        tx.update({"a": torch.zeros(2), "c": torch.zeros(3)}, state)


def test_dog_rejects_an_unknown_init_step_at_construction() -> None:
    with pytest.raises(ValueError, match="init_step"):
        ours("dog")(init_step=("unknown", 1.0))


def test_counters_are_int32_and_scalars_keep_the_params_dtype() -> None:
    params = make_tree(torch.float32)
    for name in ("acprop", "ademamix", "simplified_ademamix", "adopt", "madgrad"):
        state = ALIAS_FACTORIES[name]().init(params)
        counters = [x for x in optree.tree_leaves(state, none_is_leaf=False) if x.ndim == 0
                    and not x.is_floating_point()]
        assert counters and all(c.dtype == torch.int32 for c in counters), name
    _, state = ALIAS_FACTORIES["prodigy"]().update(make_tree(torch.float32, seed=1),
                                                   ALIAS_FACTORIES["prodigy"]().init(params),
                                                   params)
    assert state.estim_lr.dtype == state.numerator_weighted.dtype == torch.float32
    assert state.count.dtype == torch.int32


def _quadratic(params: Any) -> torch.Tensor:
    """``sum_i (i + 1) * |leaf_i - 0.5|^2`` over the leaves of ``params``."""
    return sum((leaf - 0.5).pow(2).sum() * (i + 1) for i, leaf in
               enumerate(optree.tree_leaves(params, none_is_leaf=False)))


def _quadratic_grad(params: Any) -> Any:
    leaves, spec = optree.tree_flatten(params, none_is_leaf=False)
    return optree.tree_unflatten(spec, [2 * (i + 1) * (leaf - 0.5)
                                        for i, leaf in enumerate(leaves)])


GRADIENT_CASES = {
    "adopt": lambda lr: ours("adopt")(lr, b2=0.9, nesterov=True),
    "ademamix": lambda lr: ours("ademamix")(lr, b3=0.99, weight_decay=0.1),
    "simplified_ademamix": lambda lr: ours("simplified_ademamix")(lr, alpha=1.0),
    "acprop": lambda lr: ours("acprop")(lr, eps=1e-8),
    "madgrad": lambda lr: ours("madgrad")(lr),
    "prodigy": lambda lr: ours("prodigy")(lr),
    "dadapt_adamw": lambda lr: ours("dadapt_adamw")(lr),
    "dowg": lambda lr: ours("dowg")(lr),
}


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test_differentiable_in_the_learning_rate(name: str) -> None:
    """The loss after 3 unrolled steps, differentiated in a tensor learning rate (float64)."""

    def final_loss(lr: torch.Tensor) -> torch.Tensor:
        tx = GRADIENT_CASES[name](lr)
        params = make_tree(torch.float64, seed=0)
        state = tx.init(params)
        for _ in range(3):
            grads = _quadratic_grad(params)
            updates, state = tx.update(grads, state, params)
            params = optax_compat.apply_updates(params, updates)
        return _quadratic(params)

    lr = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(final_loss, (lr,), eps=1e-6, atol=1e-6, rtol=1e-5)
    assert torch.autograd.grad(final_loss(lr), lr)[0].abs() > 0


# ----------------------------------------------------------------------------------------------
# Behaviour Optax's common contrib tests ask of every optimizer.

INJECTABLE = {
    "acprop": {"learning_rate": 1e-3},
    "ademamix": {"learning_rate": 1e-3},
    "simplified_ademamix": {"learning_rate": 1e-3},
    "adopt": {"learning_rate": 1e-2},
    "cocob": {"weight_decay": 1e-2},
    "dadapt_adamw": {"learning_rate": 1e-1},
    "dog": {"learning_rate": 1.0},
    "dowg": {"learning_rate": 1.0},
    "madgrad": {"learning_rate": 1e-2},
    "prodigy": {"learning_rate": 1e-1},
}


@pytest.mark.parametrize("name", sorted(INJECTABLE))
def test_inject_hyperparams_gives_the_same_step(name: str) -> None:
    factory = ours(name)
    static = [arg for arg in ("clip_value_fn",) if arg in inspect.signature(factory).parameters]
    plain = factory(**INJECTABLE[name])
    injected = optax_compat.inject_hyperparams(factory, static_args=static)(**INJECTABLE[name])
    params = [-torch.ones(2, 3), torch.ones(2, 5, 2)]
    grads = [torch.ones(2, 3), -torch.ones(2, 5, 2)]
    updates, state = plain.update(grads, plain.init(params), params)
    injected_updates, injected_state = injected.update(grads, injected.init(params), params)
    torch.testing.assert_close(injected_updates, updates, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(injected_state.inner_state, state, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(ALIAS_FACTORIES))
def test_update_accepts_unexpected_extra_args(name: str) -> None:
    tx = ALIAS_FACTORIES[name]()
    if not isinstance(tx, optax_compat.GradientTransformationExtraArgs):
        tx = optax_compat.with_extra_args_support(tx)
    params = make_tree(torch.float32)
    updates, _ = tx.update(make_tree(torch.float32, seed=1), tx.init(params), params,
                           unexpected_extra_args_your_optimizer_doesnt_expect=1)
    assert all(torch.isfinite(u).all() for u in optree.tree_leaves(updates, none_is_leaf=False))


@pytest.mark.parametrize("name", sorted(set(ALIAS_FACTORIES) - {"split_real_and_imaginary"}))
@pytest.mark.parametrize("dtype", BOTH)
def test_dtypes_are_stable_across_steps(name: str, dtype: torch.dtype) -> None:
    """Updates keep the params' dtype and the state keeps its dtypes, step after step."""
    tx = ALIAS_FACTORIES[name]()
    params = make_tree(dtype)
    state = tx.init(params)
    init_dtypes = [x.dtype for x in optree.tree_leaves(state, none_is_leaf=False)]
    for step in range(2):
        updates, state = tx.update(make_tree(dtype, seed=step + 1), state, params)
        assert all(u.dtype == dtype for u in optree.tree_leaves(updates, none_is_leaf=False))
        assert [x.dtype for x in optree.tree_leaves(state, none_is_leaf=False)] == init_dtypes
        params = optax_compat.apply_updates(params, updates)


@pytest.mark.parametrize("name", sorted(INJECTABLE))
def test_minimises_a_parabola(name: str) -> None:
    """A short run on a convex quadratic decreases it (Optax's convergence test, shortened)."""
    # The learning-rate-free methods run with their defaults.
    needs_rate = name in ("acprop", "ademamix", "simplified_ademamix", "adopt", "madgrad")
    tx = ours(name)(0.1) if needs_rate else ours(name)()
    target = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
    params = torch.tensor([-1.0, 10.0, 1.0], dtype=torch.float64)
    state = tx.init(params)
    start = (params - target).pow(2).sum()
    for _ in range(200):
        updates, state = tx.update(2 * (params - target), state, params)
        params = optax_compat.apply_updates(params, updates)
    assert (params - target).pow(2).sum() < 0.5 * start
