"""Fidelity to Optax on the edges: dtype arguments, JAX's 64-bit mode, hyper-parameter dtypes.

Each test runs the same configuration in real Optax and here, with JAX's ``jax_enable_x64`` and
``optax_compat.config``'s switch set together.
"""


import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat import _runtime as bb
from optax_compat import testing
from optax_compat.testing import jax_precision, make_tree, to_jax


def _leaf_dtypes(tree, torch_side):
    leaves = bb.tree_math.leaves(tree) if torch_side else jax.tree_util.tree_leaves(tree)
    return [str(getattr(leaf, "dtype", type(leaf).__name__)).replace("torch.", "")
            for leaf in leaves]


def _run_both(build, dtype, steps=3, params=None, pass_params=True):
    """Runs ``build(lib)`` in both libraries; returns (ours, theirs) (updates, state) per step."""
    given = params
    params = make_tree(dtype, seed=0) if params is None else params
    out = []
    with jax_precision(dtype):
        ours_tx, theirs_tx = build(ox), build(optax)
        theirs_params = to_jax(params)
        ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(theirs_params)
        out.append(((None, ours_state), (None, theirs_state)))
        for step in range(steps):
            grad = (make_tree(dtype, seed=step + 1) if given is None
                    else bb.tree_math.tree_map(lambda x, s=step: x * (s + 0.5), given))
            ours = ours_tx.update(grad, ours_state, params if pass_params else None)
            theirs = theirs_tx.update(to_jax(grad), theirs_state,
                                      theirs_params if pass_params else None)
            ours_state, theirs_state = ours[1], theirs[1]
            out.append((ours, theirs))
    return out


def _assert_same(runs, dtype):
    for step, ((ours_updates, ours_state), (theirs_updates, theirs_state)) in enumerate(runs):
        assert _leaf_dtypes(ours_state, True) == _leaf_dtypes(theirs_state, False), step
        testing.assert_trees_all_close(bb.tree_math.leaves(ours_state),
                                       jax.tree_util.tree_leaves(theirs_state),
                                       what=f"state {step}")
        if ours_updates is not None:
            assert _leaf_dtypes(ours_updates, True) == _leaf_dtypes(theirs_updates, False)
            testing.assert_trees_all_close(ours_updates, theirs_updates, what=f"updates {step}")


# --- dtype arguments as JAX code writes them --------------------------------------------------

SPELLINGS = ["bfloat16", np.float32, np.dtype("float32"), jnp.bfloat16, ml_dtypes.bfloat16,
             torch.bfloat16, "float32"]


@pytest.mark.parametrize("spelling", SPELLINGS, ids=str)
@pytest.mark.parametrize("factory", [
    lambda lib, d: lib.sgd(0.1, momentum=0.9, accumulator_dtype=d),
    lambda lib, d: lib.adam(0.1, mu_dtype=d),
    lambda lib, d: lib.adamw(0.1, mu_dtype=d),
    lambda lib, d: lib.lion(0.1, mu_dtype=d),
    lambda lib, d: lib.amsgrad(0.1, mu_dtype=d),
    lambda lib, d: lib.ema(0.9, accumulator_dtype=d),
    lambda lib, d: lib.trace(0.9, accumulator_dtype=d),
    lambda lib, d: lib.inject_hyperparams(lib.sgd, hyperparam_dtype=d)(0.1),
    lambda lib, d: lib.contrib.muon(0.1, mu_dtype=d),
    lambda lib, d: lib.contrib.schedule_free_adamw(0.1, state_dtype=d),
], ids=["sgd", "adam", "adamw", "lion", "amsgrad", "ema", "trace", "inject", "muon",
        "schedule_free"])
def test_dtype_arguments_in_every_spelling_match_optax(factory, spelling):
    torch_dtype = bb.canonical_dtype(spelling)
    jax_dtype = jnp.dtype(str(torch_dtype).replace("torch.", ""))
    runs = []
    with jax_precision(torch.float32):
        params = {"w": torch.linspace(-1, 1, 6).reshape(2, 3), "b": torch.ones(3)}
        ours_tx, theirs_tx = factory(ox, spelling), factory(optax, jax_dtype)
        ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(to_jax(params))
        runs.append(((None, ours_state), (None, theirs_state)))
        ours = ours_tx.update(params, ours_state, params)
        theirs = theirs_tx.update(to_jax(params), theirs_state, to_jax(params))
        runs.append((ours, theirs))
    for (_, ours_state), (_, theirs_state) in runs:
        assert _leaf_dtypes(ours_state, True) == _leaf_dtypes(theirs_state, False)


def test_canonical_dtype_reads_every_spelling_and_rejects_non_dtypes():
    assert [bb.canonical_dtype(d) for d in SPELLINGS] == [
        torch.bfloat16, torch.float32, torch.float32, torch.bfloat16, torch.bfloat16,
        torch.bfloat16, torch.float32]
    assert bb.canonical_dtype(None) is None
    assert bb.canonical_dtype(float) == torch.float32
    with ox.config.enable_x64():
        assert bb.canonical_dtype(float) == torch.float64
        assert bb.canonical_dtype(int) == torch.int64
    with pytest.raises(TypeError, match="Not a dtype"):
        bb.canonical_dtype("floaty")


def test_tree_utils_take_dtype_spellings():
    tree = {"a": torch.ones(2)}
    assert ox.tree_utils.tree_cast(tree, "bfloat16")["a"].dtype == torch.bfloat16
    assert ox.tree_utils.tree_zeros_like(tree, np.float64)["a"].dtype == torch.float64
    assert ox.tree_utils.tree_full_like(tree, 3, dtype=jnp.int32)["a"].dtype == torch.int32


# --- the x64 switch -----------------------------------------------------------------------------


def test_config_switch_is_off_by_default_and_scoped():
    assert not ox.config.jax_enable_x64
    assert ox.linear_schedule(1.0, 0.0, 10)(3).dtype == torch.float32
    with ox.config.enable_x64():
        assert ox.config.jax_enable_x64
        assert ox.linear_schedule(1.0, 0.0, 10)(3).dtype == torch.float64
    assert not ox.config.jax_enable_x64
    ox.config.update("jax_enable_x64", True)
    try:
        assert ox.tree_utils.tree_dtype({}) == torch.float64
    finally:
        ox.config.update("enable_x64", False)
    with pytest.raises(AttributeError, match="Unrecognized"):
        ox.config.update("jax_platforms", "cpu")


def test_cosine_schedule_near_its_end_in_a_float32_program_matches_optax():
    """An int32 count with x64 off: float32 arithmetic, as Optax (was float64: 0.3% off)."""
    with jax_precision(torch.float32):
        theirs = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 1000, 1e-6)
        ours = ox.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 1000, 1e-6)
        for count in (990, 997, 999, 1000, 1005):
            mine = ours(torch.tensor(count, dtype=torch.int32))
            reference = theirs(jnp.asarray(count, jnp.int32))
            assert mine.dtype == torch.float32
            np.testing.assert_allclose(float(mine), float(reference), rtol=2e-6)
            assert ours(count).dtype == torch.float32


# --- inject_hyperparams dtypes ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["x64_off", "x64_on"])
@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant", "number"])
def test_inject_hyperparams_keeps_schedule_dtypes_as_optax(schedule, dtype):
    def build(lib):
        lr = {"linear": lib.linear_schedule(0.1, 0.01, 4),
              "cosine": lib.cosine_decay_schedule(0.1, 4),
              "constant": lib.constant_schedule(0.1), "number": 0.1}[schedule]
        return lib.inject_hyperparams(lib.adam)(learning_rate=lr, b1=0.8)
    _assert_same(_run_both(build, dtype, steps=3), dtype)


def test_inject_hyperparams_without_params_keeps_state_dtypes():
    """``params=None`` at update must not recast the hyper-parameters stored at init."""
    def build(lib):
        return lib.inject_hyperparams(lib.sgd)(learning_rate=lib.cosine_decay_schedule(0.1, 5),
                                               momentum=0.9)
    runs = _run_both(build, torch.float64, steps=3, pass_params=False)
    _assert_same(runs, torch.float64)
    init_dtypes = _leaf_dtypes(runs[0][0][1], True)
    assert all(_leaf_dtypes(state, True) == init_dtypes for (_, state), _ in runs[1:])


def test_inject_hyperparams_float32_hyperparams_of_float64_params_round_as_optax():
    def build(lib):
        dtype = torch.float32 if lib is ox else jnp.float32
        return lib.inject_hyperparams(lib.adam, hyperparam_dtype=dtype)(learning_rate=0.1)
    _assert_same(_run_both(build, torch.float64, steps=4), torch.float64)


# --- deprecated names ---------------------------------------------------------------------------

DEPRECATED = [("", "differentially_private_aggregate"), ("", "DifferentiallyPrivateAggregateState"),
              ("", "dpsgd"), (".tree_utils", "tree_scalar_mul"),
              (".tree_utils", "tree_add_scalar_mul"), (".tree_utils", "tree_l1_norm"),
              (".tree_utils", "tree_l2_norm"), (".tree_utils", "tree_linf_norm")]


def _module(lib, suffix):
    return lib.tree_utils if suffix else lib


@pytest.mark.parametrize("suffix,name", DEPRECATED)
def test_deprecated_names_resolve_with_optax_warning(suffix, name):
    with pytest.warns(DeprecationWarning) as theirs:
        getattr(_module(optax, suffix), name)
    with pytest.warns(DeprecationWarning) as ours:
        value = getattr(_module(ox, suffix), name)
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    assert name not in dir(_module(ox, suffix))
    assert callable(value)


def test_deprecated_norms_compute_the_norms():
    tree = {"a": torch.tensor([3.0, -4.0])}
    with pytest.warns(DeprecationWarning):
        norms = [getattr(ox.tree_utils, f"tree_{n}_norm")(tree) for n in ("l1", "l2", "linf")]
    assert [float(n) for n in norms] == [7.0, 5.0, 4.0]


def test_removed_name_and_public_names_are_optax_ones():
    with pytest.raises(AttributeError, match="monte_carlo is deprecated"):
        ox.monte_carlo
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ox.nope
    public = lambda module: {n for n in dir(module) if not n.startswith("_")}
    # Only our switch, the porting helpers, ConditionFn (Optax keeps it in optax.transforms),
    # the PyTorch extensions (torch.optim adapter, checkpoints, the whole in-place step, fused
    # steps and the declarations your own transformations take them with, states in fewer bits,
    # distributed states)
    # and the testing submodule (once imported) are extra.
    assert public(ox) - public(optax) - {"testing", "distributed"} == {
        "config", "porting", "ConditionFn", "TorchOptimizer", "torch_optimizer", "checkpoint",
        "inplace_step", "fused_step", "FusedStep", "capabilities", "memory"}
    assert public(optax) - public(ox) == set()
    # Optax's tree_utils also lists the modules it imported (functools, typing).
    assert public(ox.tree_utils) ^ public(optax.tree_utils) == {"functools", "typing"}


# --- empty trees --------------------------------------------------------------------------------

# Optax itself fails on an empty tree here (its code indexes a tree it assumes non-empty); ours
# returns empty updates, which is what a masked or partitioned empty group needs.
OPTAX_FAILS_ON_EMPTY = {"contrib.scale_by_muon", "contrib.galore", "contrib.scale_by_galore",
                        "contrib.sophia"}
# A line search needs a parameter to search along: both libraries refuse an empty tree (Optax
# with an IndexError, ours with a ValueError saying so).
LINE_SEARCHES = {"scale_by_backtracking_linesearch", "scale_by_zoom_linesearch", "lbfgs"}
EMPTY_TREES = [{}, {"a": {}, "b": [None, ()]}]


def _extra_args(name, lib, tree):
    jax_side = lib is optax
    one = jnp.asarray(1.0) if jax_side else torch.tensor(1.0)
    table = {"value": one, "grad": tree, "value_fn": lambda params: one,
             "obj_fn": lambda params: one}
    return {key: table[key] for key in SPECS[name].extra_args}


from hypothesis import HealthCheck, given, settings  # noqa: E402

from optax_compat.testing import strategies  # noqa: E402
from optax_compat.testing._config import Config  # noqa: E402
from optax_compat.testing._hyperparameters import SPECS  # noqa: E402

EMPTY_NAMES = sorted(name for name, entry in SPECS.items() if not entry.per_example_grads)


@pytest.mark.parametrize("x64", [False, True], ids=["x64_off", "x64_on"])
@pytest.mark.parametrize("name", EMPTY_NAMES)
@settings(max_examples=1, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=strategies.hyperparameters.__globals__["st"].data())
def test_empty_tree_in_empty_updates_out(name, x64, data):
    config = Config(name, kwargs=data.draw(strategies.hyperparameters(name)))
    dtype = torch.float64 if x64 else torch.float32
    with warnings.catch_warnings(), jax_precision(dtype):
        warnings.simplefilter("ignore")
        for index, tree in enumerate(EMPTY_TREES):
            ours_tx = config.build(ox)
            if name in LINE_SEARCHES:
                with pytest.raises(ValueError, match="at least one parameter"):
                    ours_tx.init(tree)
                continue
            state = ours_tx.init(tree)
            updates, state = ours_tx.update(tree, state, tree, **_extra_args(name, ox, tree))
            assert updates == tree
            if name in OPTAX_FAILS_ON_EMPTY or index > 0:
                continue
            theirs_tx = config.build(optax)
            theirs_state = theirs_tx.init(tree)
            theirs_updates, theirs_state = theirs_tx.update(
                tree, theirs_state, tree, **_extra_args(name, optax, tree))
            assert theirs_updates == tree
            # Random keys are int64 seeds here, typed or uint32 raw keys in JAX.
            assert [d for d in _leaf_dtypes(state, True) if d != "int64"] == [
                d for d in _leaf_dtypes(theirs_state, False)
                if not d.startswith("key") and d != "uint32"]


# --- porting helpers ----------------------------------------------------------------------------


def test_value_and_grad_unpacked_in_jax_order_gets_a_clear_error():
    params = {"w": torch.ones(3), "b": torch.zeros(())}
    loss_fn = lambda p: (p["w"] ** 2).sum() + p["b"]
    optimizer = ox.adam(0.1)
    state = optimizer.init(params)
    loss, grads = torch.func.grad_and_value(loss_fn)(params)  # JAX's order: swapped
    del loss
    with pytest.raises(ValueError, match=r"grad_and_value returns \(grad, value\)"):
        optimizer.update(grads, state, params)
    with pytest.raises(ValueError, match=r"reverse of jax\.value_and_grad"):
        optimizer.update(torch.func.grad_and_value(loss_fn)(params), state, params)
    with pytest.raises(ValueError) as info:
        optimizer.update({"w": torch.ones(3)}, state, params)
    assert "grad_and_value" not in str(info.value)


def test_split_key_repeats_for_an_int_and_advances_a_generator():
    assert torch.equal(ox.porting.split_key(3, 4), ox.porting.split_key(3, 4))
    assert ox.porting.split_key(3, 4).shape == (4,)
    generator = torch.Generator().manual_seed(3)
    assert not torch.equal(ox.porting.split_key(generator), ox.porting.split_key(generator))


def test_path_entries_have_a_public_home():
    assert ox.porting.DictKey("w") == ox.tree_utils._state_utils.DictKey("w")
    assert {"SequenceKey", "GetAttrKey", "NamedTupleKey"} <= set(vars(ox.porting))


# --- dtypes where params are not visible --------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["x64_off", "x64_on"])
@pytest.mark.parametrize("case", ["bool_measure_with_ema", "muon_without_matrices"])
def test_dtype_from_what_is_visible_matches_optax(case, dtype):
    def build(lib):
        if case == "muon_without_matrices":
            return lib.contrib.muon(0.1)
        is_finite = (lambda u: torch.isfinite(u["w"]).all()) if lib is ox else (
            lambda u: jnp.all(jnp.isfinite(u["w"])))
        return lib.measure_with_ema(is_finite, 0.9)
    params = {"w": torch.linspace(-1, 1, 3, dtype=dtype)}
    _assert_same(_run_both(build, dtype, steps=2, params=params), dtype)
