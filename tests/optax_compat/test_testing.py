"""Self-tests of optax_compat.testing: strategies, assertions and property checks.

Each property check is run on a correct hand-written momentum transform and on deliberately
wrong versions of it; a check must catch its own defect and pass on the correct transform.
"""

import functools
import inspect
import subprocess
import sys
import unittest
from typing import Any, NamedTuple

import numpy as np
import optax
import optree
import pytest
import torch
from hypothesis import assume, example, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from hypothesis.extra import numpy as hnp

import optax_compat
from optax_compat._runtime import tree_math
from optax_compat._src import base
from optax_compat.testing import (
    assert_leaves_close,
    assert_tree_structure_equal,
    assert_trees_all_close,
    check_compilable,
    check_differentiable,
    check_matches_optax,
    check_pure,
    check_state_stable,
    tolerance,
)
from optax_compat.testing._hyperparameters import SPECS
from optax_compat.testing.strategies import (
    Config,
    DrawnTransformation,
    hyperparameters,
    matching_trees,
    params_and_grads,
    programs,
    pytrees,
    record_type,
    schedule_names,
    schedules,
    tensors,
    transform_names,
    transforms,
)

# Examples are drawn per the hypothesis profile of tests/conftest.py (fixed in CI).
SETTINGS = settings(max_examples=20)


# ----------------------------------------------------------------------------------------------
# A correct transform (Optax's ``trace``) and deliberately wrong versions of it.


class TraceState(NamedTuple):
    """Optax's ``TraceState``, so that check_matches_optax can hold it beside ``optax.trace``."""

    trace: Any


class GrowingTraceState(NamedTuple):
    trace: Any
    steps_taken: int
    extra: Any


def trace(decay: Any = 0.9, defect: str | None = None) -> base.GradientTransformation:
    """Momentum ``trace = decay * trace + updates``, with an optional deliberate defect.

    Defects: "mutates" accumulates into the incoming updates in place; "grows" adds a state
    leaf at step 2; "detach" cuts the updates from the autograd graph; "off" returns numbers
    1e-3 away from Optax's; "host_sync" branches in Python on a tensor value.
    """

    def init(params):
        zeros = tree_math.tree_map(torch.zeros_like, params)
        return GrowingTraceState(zeros, 0, None) if defect == "grows" else TraceState(zeros)

    def update(updates, state, params=None):
        del params
        xs, spec = tree_math.flatten(updates)
        old = tree_math.leaves_like(state.trace, spec, "trace", reference=updates)
        if defect == "detach":
            xs = [x.detach() for x in xs]
        if defect == "mutates":
            torch._foreach_add_(xs, tree_math.mul(old, decay))
            new = xs
        else:
            new = tree_math.add(tree_math.mul(old, decay), xs)
        out = new
        if defect == "off":
            out = tree_math.add(new, 1e-3)
        if defect == "host_sync" and float(tree_math.sum_of_squares(new).detach()) < 0:
            out = tree_math.neg(new)
        new_trace = tree_math.unflatten(spec, new)
        if defect == "grows":
            steps = state.steps_taken + 1
            extra = tree_math.sum_of_squares(new) if steps >= 2 else None
            return tree_math.unflatten(spec, out), GrowingTraceState(new_trace, steps, extra)
        return tree_math.unflatten(spec, out), TraceState(new_trace)

    return base.GradientTransformation(init, update)


def optax_trace(module, defect=None, **kwargs):
    """``optax.trace`` in Optax, the hand-written ``trace`` (with ``defect``) in ours."""
    if module.__name__ == "optax":
        return module.trace(**kwargs)
    return trace(defect=defect, **kwargs)


def small_problem(dtype=torch.float64):
    generator = torch.Generator().manual_seed(0)

    def tree():
        rand = lambda *shape: torch.randn(shape, generator=generator, dtype=dtype)
        return {"w": rand(2, 3), "b": (rand(), None), "r": record_type(1)(rand(2))}

    return tree(), tree()


CHECKS = {
    "pure": lambda defect, p, g: check_pure(trace(defect=defect), p, g, steps=3),
    "state_stable": lambda defect, p, g: check_state_stable(trace(defect=defect), p, g, steps=3),
    "differentiable": lambda defect, p, g: check_differentiable(trace(defect=defect), p, g),
    "differentiable_hyperparameter": lambda defect, p, g: check_differentiable(
        lambda decay: trace(decay, defect=defect), p, g, steps=3, hyperparameter=0.9),
    "compilable": lambda defect, p, g: check_compilable(trace(defect=defect), p, g,
                                                        backend="eager"),
    "matches_optax": lambda defect, p, g: check_matches_optax(
        lambda module, **kw: optax_trace(module, defect=defect, **kw), {"decay": 0.9}, p, g),
}
# Which checks each defect must fail; every other check must pass. A state that grows has no
# counterpart in Optax, so the oracle rejects it too.
CAUGHT_BY = {
    None: set(),
    "mutates": {"pure"},
    "grows": {"state_stable", "matches_optax"},
    "detach": {"differentiable", "differentiable_hyperparameter"},
    "off": {"matches_optax"},
    "host_sync": {"compilable"},
}
EXPECTED_REASON = {
    "pure": "modified updates",
    "state_stable": "state after update 2",
    "differentiable": "not correctly differentiable",
    "differentiable_hyperparameter": "not correctly differentiable",
    "compilable": "graph break",  # the host synchronisation's, reported by explain
    "matches_optax": "",
}


@pytest.mark.parametrize("defect", list(CAUGHT_BY), ids=str)
@pytest.mark.parametrize("check", list(CHECKS))
def test_each_check_catches_exactly_its_defect(check, defect):
    params, grads = small_problem()
    if check in CAUGHT_BY[defect]:
        with pytest.raises(AssertionError, match=EXPECTED_REASON[check].replace("(", r"\(")
                           .replace(")", r"\)")):
            CHECKS[check](defect, params, grads)
    else:
        CHECKS[check](defect, params, grads)


def test_failure_messages_name_the_step_and_path():
    params, grads = small_problem()
    with pytest.raises(AssertionError,
                       match=r"update 1 modified updates\['b'\]\[0\] in place"):
        check_pure(trace(defect="mutates"), params, grads)
    with pytest.raises(AssertionError,
                       match=r"after update 2 differs .*the state has an extra leaf at path \[2\]"):
        check_state_stable(trace(defect="grows"), params, grads)
    with pytest.raises(AssertionError, match=r"update 1: updates\['b'\]\[0\].*difference 0.001"):
        check_matches_optax(lambda m, **kw: optax_trace(m, defect="off", **kw), {"decay": 0.9},
                            params, grads)


def test_check_pure_catches_container_mutation_and_hidden_state():
    params, grads = small_problem()

    def replaces_key(updates, state, params=None):
        updates["w"] = updates["w"] * 2
        return updates, state

    with pytest.raises(AssertionError, match="containers of updates"):
        check_pure(base.GradientTransformation(base.init_empty_state, replaces_key), params,
                   grads)
    calls = []

    def remembers_calls(updates, state, params=None):
        calls.append(None)
        return tree_math.tree_map(lambda u: u * len(calls), updates), state

    with pytest.raises(AssertionError, match="repeated update 1: updates"):
        check_pure(base.GradientTransformation(base.init_empty_state, remembers_calls), params,
                   grads)


def test_check_state_stable_catches_a_dtype_change():
    params, grads = small_problem()

    def promotes(updates, state, params=None):
        return updates, TraceState(tree_math.tree_map(lambda t: t.float(), state.trace))

    tx = base.GradientTransformation(trace().init, promotes)
    with pytest.raises(AssertionError, match=r"after update 1 .* at \.trace\['b'\]\[0\]: \(\) "
                                             r"torch.float64 on cpu became \(\) torch.float32"):
        check_state_stable(tx, params, grads)


def test_check_compilable_with_inductor_matches_eager(monkeypatch, tmp_path):
    # Inductor reads ATEN_CPU_CAPABILITY at every compilation, but its FX-graph cache key does
    # not: a graph cached under avx2 must not be reused as scalar code under ``default``.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    params, grads = small_problem(torch.float32)
    for capability in ("avx2", "default"):
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", capability)
        check_compilable(trace(), params, grads)


def test_check_matches_optax_by_name_and_in_float32():
    params, grads = small_problem(torch.float32)
    # optax_compat.identity exists from the foundation; a name resolves in both modules.
    check_matches_optax("identity", {}, params, grads, steps=2)
    check_matches_optax(optax_trace, {"decay": 0.5}, params, lambda step: grads, steps=2)
    # Extra update arguments, a tensor hyperparameter and a dtype reach both worlds.
    check_matches_optax("scale_by_polyak", {"f_min": torch.tensor(-1.0)}, params, grads,
                        extra_args=lambda step: {"value": torch.tensor(2.0 + step)})
    check_matches_optax("trace", {"decay": 0.9, "accumulator_dtype": torch.float32}, params,
                        grads)


def test_check_matches_optax_skips_without_optax(monkeypatch):
    monkeypatch.setitem(sys.modules, "optax", None)
    params, grads = small_problem()
    with pytest.raises(unittest.SkipTest, match="needs real Optax"):
        check_matches_optax("identity", {}, params, grads)


@SETTINGS
@given(params_and_grads(steps=1))
def test_checks_pass_on_random_trees(drawn):
    params, (grads,) = drawn
    check_pure(trace(), params, grads)
    check_state_stable(trace(), params, grads)


@SETTINGS
@given(params_and_grads(steps=1, max_leaves=3, dtypes=[torch.float64]))
def test_check_differentiable_passes_on_random_trees(drawn):
    params, (grads,) = drawn
    check_differentiable(trace(), params, grads)


# ----------------------------------------------------------------------------------------------
# Assertions.


def test_assert_trees_all_close_names_the_path():
    tree = {"a": [torch.ones(2), torch.zeros(())], "b": None}
    assert_trees_all_close(tree, {"a": [torch.ones(2) + 1e-7, torch.zeros(())], "b": None})
    with pytest.raises(AssertionError, match=r"grads\['a'\]\[0\]: 1 of 2 values differ"):
        assert_trees_all_close({"a": [torch.tensor([1.0, 2.0]), torch.zeros(())]},
                               {"a": [torch.tensor([1.0, 2.1]), torch.zeros(())]}, what="grads")
    with pytest.raises(AssertionError, match=r"shape \(2,\) where \(3,\)"):
        assert_trees_all_close([torch.ones(2)], [torch.ones(3)])
    with pytest.raises(AssertionError,
                       match=r"tree has no leaf at path \['a'\]\[1\] that expected has"):
        assert_trees_all_close({"a": [torch.ones(2)]}, tree)


def test_assert_trees_all_close_accepts_numpy_and_nan():
    assert_trees_all_close([torch.tensor([np.nan, 1.0])], [np.array([np.nan, 1.0])])
    with pytest.raises(AssertionError):
        assert_trees_all_close([torch.tensor([np.nan])], [np.array([1.0])])
    assert_trees_all_close([torch.tensor([1.0])], [np.array([1.1])], rtol=0.2)


def test_tolerance_follows_the_least_precise_dtype_of_the_values_compared():
    import jax.numpy as jnp

    f32, f64 = torch.ones(2), torch.ones(2, dtype=torch.float64)
    assert tolerance(f64, f64) == (1e-10, 1e-12)
    # A float32 value inside a float64 test (JAX's promotion) gets float32's tolerance,
    # whichever side it is on and whatever library holds it.
    assert tolerance(f64, f32) == tolerance(np.ones(2, np.float32), f64) == (1e-5, 1e-6)
    assert tolerance(f64, jnp.ones(2, jnp.bfloat16)) == (1.6e-2, 1e-5)
    assert tolerance(torch.ones(2, dtype=torch.complex128), f64) == (1e-10, 1e-12)
    assert tolerance(torch.ones(2, dtype=torch.int32), np.ones(2, np.int32)) == (0.0, 0.0)
    # Overrides: one number for every dtype, or per dtype (others keep the default).
    assert tolerance(f64, f32, rtol=0.5, atol=0.25) == (0.5, 0.25)
    assert tolerance(f64, f32, rtol={torch.float32: 1e-4}) == (1e-4, 1e-6)
    assert tolerance(f64, rtol={torch.float32: 1e-4}) == (1e-10, 1e-12)
    assert tolerance(f64, f32)._asdict() == {"rtol": 1e-5, "atol": 1e-6}


def test_assert_trees_all_close_uses_the_tolerance_of_each_pair_of_leaves():
    # Two values a float32 step apart (the last bit of a float32 exp differs between CPUs).
    x = torch.tensor([0.9746794700622559], dtype=torch.float64)
    y = torch.tensor([0.9746794104576111], dtype=torch.float64)
    assert_trees_all_close({"a": x}, {"a": y.float()})
    assert_trees_all_close({"a": x.float()}, {"a": y})
    with pytest.raises(AssertionError, match=r"\['a'\]: 1 of 1 values differ \(rtol=1e-10"):
        assert_trees_all_close({"a": x}, {"a": y})
    # Per pair: the float64 leaf beside a float32 one keeps the float64 tolerance.
    with pytest.raises(AssertionError, match=r"\['b'\]"):
        assert_trees_all_close({"a": x, "b": x}, {"a": y.float(), "b": y})
    assert_leaves_close({"a": x, "b": x}, [y.float(), y], rtol={torch.float64: 1e-6})


def test_assert_tree_structure_equal_names_the_difference():
    assert_tree_structure_equal({"a": (1, 2)}, {"a": (3, 4)})
    with pytest.raises(AssertionError, match=r"state.*key 'b'"):
        assert_tree_structure_equal({"a": 1}, {"a": 1, "b": 2}, what="state")
    with pytest.raises(AssertionError, match="node types differ"):
        assert_tree_structure_equal((1, 2), [1, 2])


# ----------------------------------------------------------------------------------------------
# Strategies.


def depth(tree) -> int:
    if isinstance(tree, dict):
        return 1 + max((depth(v) for v in tree.values()), default=0)
    if isinstance(tree, (list, tuple)):
        return 1 + max((depth(v) for v in tree), default=0)
    return 0


@SETTINGS
@given(pytrees(min_leaves=2, max_leaves=4, max_depth=2, max_dims=3, max_side=2,
               dtypes=[torch.float64], kinds=["dict", "namedtuple"]))
def test_pytrees_respects_its_bounds(tree):
    leaves = tree_math.leaves(tree)
    assert 2 <= len(leaves) <= 4
    assert depth(tree) <= 2
    assert all(leaf.dtype == torch.float64 and leaf.ndim <= 3 for leaf in leaves)
    assert all(1 <= size <= 2 for leaf in leaves for size in leaf.shape)
    assert all(bool(torch.isfinite(leaf).all()) and bool((leaf.abs() <= 10).all())
               for leaf in leaves)
    assert not isinstance(tree, (list, torch.Tensor)) and type(tree) is not tuple


@SETTINGS
@given(pytrees(), st.data())
def test_matching_trees_match_structure_shapes_dtypes_devices(tree, data):
    other = data.draw(matching_trees(tree))
    assert_tree_structure_equal(tree, other)
    for a, b in zip(tree_math.leaves(tree), tree_math.leaves(other)):
        assert (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device)


def test_pytrees_opt_in_features_are_reachable():
    leaves = lambda tree: tree_math.leaves(tree)
    find(pytrees(allow_nan=True), lambda t: any(bool(x.isnan().any()) for x in leaves(t)))
    find(pytrees(allow_infinity=True), lambda t: any(bool(x.isinf().any()) for x in leaves(t)))
    find(pytrees(allow_empty=True), lambda t: any(x.numel() == 0 for x in leaves(t)))
    find(pytrees(dtypes=[torch.bfloat16, torch.float32], mixed_dtypes=True),
         lambda t: {x.dtype for x in leaves(t)} == {torch.bfloat16, torch.float32})
    find(pytrees(), lambda t: any(x.ndim == 0 for x in leaves(t)))
    find(pytrees(), lambda t: isinstance(t, dict) and None in t.values())
    bounded = find(tensors((2,), torch.float16, min_value=0.1, max_value=0.3), lambda x: True)
    assert bool((bounded >= 0.1).all()) and bool((bounded <= 0.3).all())
    tiny = find(tensors((3,), min_magnitude=1e-3), lambda x: bool((x != 0).all()))
    assert bool((tiny.abs() >= 1e-3).all())
    find(pytrees(min_leaves=0), lambda t: not leaves(t))


def test_counter_examples_shrink_to_the_simplest_tree():
    shrunk = find(pytrees(), lambda t: any(bool((x.abs() > 1).any())
                                           for x in tree_math.leaves(t)))
    assert isinstance(shrunk, torch.Tensor) and shrunk.shape == ()
    assert 1 < abs(float(shrunk)) <= 2
    two_leaves = find(pytrees(), lambda t: len(tree_math.leaves(t)) >= 2)
    assert len(two_leaves) == 2 and all(x.shape == () and float(x) == 0
                                        for x in tree_math.leaves(two_leaves))


def test_bad_strategy_arguments_fail_clearly():
    with pytest.raises(ValueError, match="kinds"):
        pytrees(kinds=["set"]).example()
    with pytest.raises(ValueError, match="min_leaves"):
        pytrees(min_leaves=3, max_leaves=2).example()


def test_library_imports_without_hypothesis():
    code = ("import sys; sys.modules['hypothesis'] = None; import optax_compat; "
            "import optax_compat.testing; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.stdout.strip() == "ok", result.stderr


# ----------------------------------------------------------------------------------------------
# Configuration strategies: hyperparameters, schedules, transforms.

def resolve(module, name):
    for part in name.split("."):
        module = getattr(module, part)
    return module


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hyperparameter_names_follow_optax_signatures(name):
    parameters = inspect.signature(resolve(optax, name)).parameters
    entry = SPECS[name]
    without_default = {p for p, v in parameters.items()
                       if v.default is inspect.Parameter.empty
                       and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)}
    # A random key has a default of None in Optax, but one of key/seed must be given.
    assert without_default <= set(entry.required) <= set(parameters)
    assert set(entry.optional) <= set(parameters) - set(entry.required)


# Optax modules defining gradient transformations (not combinators, wrappers or losses).
TRANSFORM_MODULES = ("optax._src.alias", "optax._src.transform", "optax._src.factorized",
                     "optax._src.linesearch", "optax.transforms._accumulation",
                     "optax.transforms._adding", "optax.transforms._clipping",
                     "optax.transforms._constraining")
NOT_TRANSFORMS = {"skip_large_updates", "skip_not_finite", "per_example_global_norm_clip",
                  "per_example_layer_norm_clip", "value_and_grad_from_state"}
CONTRIB_WRAPPERS = {"mechanize", "sam", "schedule_free", "schedule_free_eval_params",
                    "split_real_and_imaginary"}


def test_every_optax_alias_and_transform_has_ranges():
    expected = {"identity", "set_to_zero"}
    for name in dir(optax):
        obj = getattr(optax, name)
        obj = obj.func if isinstance(obj, functools.partial) else obj  # nadam, nadamw
        if inspect.isfunction(obj) and obj.__module__ in TRANSFORM_MODULES:
            expected.add(name)
    for name in dir(optax.contrib):
        if inspect.isfunction(getattr(optax.contrib, name)) and not name.startswith("_"):
            expected.add(f"contrib.{name}")
    expected -= NOT_TRANSFORMS | {f"contrib.{name}" for name in CONTRIB_WRAPPERS}
    assert expected == set(SPECS), (sorted(expected - set(SPECS)), sorted(set(SPECS) - expected))


def tiny_tree():
    generator = torch.Generator().manual_seed(1)
    rand = lambda *shape: torch.randn(shape, generator=generator, dtype=torch.float64)
    return {"w": rand(3, 2), "b": rand(2), "s": rand()}


def tiny_tree_for(name):
    """SM3 needs leaves with at least one dimension, scale_by_muon matrices, as in Optax."""
    tree = tiny_tree()
    if SPECS[name].matrix_leaves:
        return {k: v for k, v in tree.items() if v.ndim == 2}
    return tree if SPECS[name].scalar_leaves else {k: v for k, v in tree.items() if v.ndim}


def leaf_shapes_for(name):
    """Shapes to draw leaves from, or None for any shape."""
    if SPECS[name].matrix_leaves:
        return hnp.array_shapes(min_dims=2, max_dims=2, max_side=3)
    return None if SPECS[name].scalar_leaves else hnp.array_shapes(min_dims=1, max_side=3)


# Optax applies mu_dtype to these states at init only: an update with wider gradients widens
# them (optimistic Adam's previous gradient, AdEMAMix's moments); ours follows.
MU_DTYPE_ONLY_AT_INIT = {"optimistic_adam", "optimistic_adam_v2", "contrib.ademamix",
                         "contrib.scale_by_ademamix"}

VALUE_ONLY = [name for name in transform_names(include_extra_args=True)
              if SPECS[name].extra_args == ("value",)]


@pytest.mark.parametrize("name", sorted({*transform_names(
    include_random=True, include_without_scalar_leaves=True), *VALUE_ONLY}))
@settings(max_examples=5)
@given(data=st.data())
def test_every_transformation_is_pure_and_keeps_its_state_on_random_trees(name, data):
    kwargs = data.draw(hyperparameters(name, with_schedules=True), label="kwargs")
    params, (grads,) = data.draw(params_and_grads(
        steps=1, max_leaves=3, min_value=-3, max_value=3, shapes=leaf_shapes_for(name)),
        label="params, grads")
    extra_args = {"value": torch.tensor(1.0)} if name in VALUE_ONLY else None
    tx = resolve(optax_compat, name)(**kwargs)
    check_pure(tx, params, grads, extra_args=extra_args)
    if not (name in MU_DTYPE_ONLY_AT_INIT and kwargs.get("mu_dtype") is not None):
        check_state_stable(tx, params, grads, steps=3, extra_args=extra_args)
    state = tx.init(tiny_tree_for(name))
    updates, _ = tx.update(tiny_tree_for(name), state, tiny_tree_for(name),
                           **(extra_args or {}))
    if not (kwargs.get("eps_in_sqrt") is False
            and (kwargs.get("centered") or name == "scale_by_stddev")):
        # Centred RMSProp (and scale_by_stddev) with eps outside the square root takes
        # sqrt(nu - mu**2), which rounding makes slightly negative after one step: NaN in
        # Optax as here.
        assert all(bool(torch.isfinite(leaf).all()) for leaf in tree_math.leaves(updates))


SMOOTH = [name for name in ["sgd", "adam", "adamw", "nadam", "rmsprop", "adagrad", "adabelief",
                            "yogi", "amsgrad", "trace", "ema", "scale_by_adam", "scale_by_rms"]
          if hasattr(optax_compat, name)]


@pytest.mark.parametrize("name", SMOOTH)
def test_smooth_transformations_are_differentiable(name):
    function = resolve(optax_compat, name)
    params, grads = small_problem()
    kwargs = {"decay": 0.9} if name in ("trace", "ema") else {}
    takes_learning_rate = "learning_rate" in inspect.signature(function).parameters
    check_differentiable(function(**kwargs, **({"learning_rate": 0.1} if takes_learning_rate
                                               else {})), params, grads, steps=3)
    if takes_learning_rate:
        check_differentiable(lambda learning_rate: function(learning_rate=learning_rate),
                             params, grads, steps=3, hyperparameter=0.1)


@pytest.mark.parametrize("name", ["scale_by_adam", "trace", "scale_by_rms", "clip_by_global_norm"])
@settings(max_examples=3)
@given(data=st.data())
def test_drawn_hyperparameters_match_optax(name, data):
    kwargs = data.draw(hyperparameters(name, with_schedules=True), label="kwargs")
    tolerance = {"rtol": 1e-6, "atol": 1e-7} if "schedule" in repr(kwargs) else {}
    check_matches_optax(name, kwargs, tiny_tree(), lambda step: tiny_tree(), steps=2,
                        **tolerance)


def test_unknown_hyperparameter_name_fails_clearly():
    with pytest.raises(ValueError, match="No hyperparameter ranges are known for 'adamm'"):
        hyperparameters("adamm")


@settings(max_examples=15)
@given(schedules())
def test_drawn_schedules_match_optax(schedule):
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        theirs = schedule.config.build(optax)
        for count in [0, 1, 5, 19, 40]:
            ours = torch.as_tensor(schedule(count))
            assert ours.shape == () and bool(torch.isfinite(ours))
            assert_trees_all_close(ours, theirs(count), what=f"count {count}")
            # An int32 count, as optimizer states hold: JAX computes parts of some schedules
            # (the onecycle ones) in float32 then, so agreement is at float32 precision.
            ours = torch.as_tensor(schedule(torch.tensor(count, dtype=torch.int32)))
            assert_trees_all_close(ours, theirs(jnp.asarray(count, jnp.int32)), rtol=1e-6,
                                   atol=1e-7, what=f"int32 count {count}")


def test_every_schedule_is_drawn():
    drawn = set()
    find(schedules(max_depth=1), lambda s: drawn.add(s.config.name) or len(drawn) == len(
        schedule_names()), settings=settings(max_examples=2000, database=None, derandomize=True))
    assert drawn == set(schedule_names())


GALORE = Config("contrib.galore", kwargs={"learning_rate": 0.01})


@settings(max_examples=8)
@given(transforms(max_depth=2),
       params_and_grads(max_leaves=3, dtypes=[torch.float64], min_magnitude=1e-6))
@example(DrawnTransformation(GALORE.build(optax_compat), GALORE),
         ({"m": torch.tensor([0.98, 6.69], dtype=torch.float64), "d": None},
          [{"m": torch.tensor([-6.3, 4.6], dtype=torch.float64), "d": None}]))
def test_drawn_transforms_match_optax_and_print_as_code(drawn, problem):
    _, config = drawn
    params, (grads,) = problem
    # Optax's GaLore init reads the dtype of every leaf, so it fails on a None (empty) subtree.
    assume("galore" not in repr(config)
           or None not in optree.tree_leaves(params, none_is_leaf=True))
    rebuilt = eval(repr(config), {**vars(optax_compat), "torch": torch})
    assert isinstance(rebuilt, base.GradientTransformation) and repr(drawn) == repr(config)
    # A schedule evaluated at an int32 count (as states hold) runs in float32 in JAX and here.
    tolerance = {"rtol": 1e-6, "atol": 1e-7} if "schedule" in repr(config) else {}
    check_matches_optax(config.build, {}, params, grads, steps=2, **tolerance)


@pytest.mark.parametrize("name", ["contrib.schedule_free_sgd", "contrib.schedule_free_adamw"])
def test_schedule_free_b1_is_drawn_away_from_zero(name):
    with pytest.raises(NoSuchExample):
        find(hyperparameters(name), lambda kwargs: kwargs.get("b1", 0.9) < 0.1,
             settings=settings(max_examples=100, database=None, derandomize=True))


@settings(max_examples=40)
@given(programs(dtype=torch.float64, names=("contrib.schedule_free_sgd",)))
def test_programs_of_names_without_an_injectable_one_draw_no_inject_hyperparams(program):
    assert "inject_hyperparams" not in repr(program.config)


def test_transforms_shrink_to_a_readable_chain():
    shrunk = find(transforms(max_depth=1), lambda d: d.config.name == "chain")
    assert repr(shrunk) == "chain(identity())"
    assert find(transforms(names=["trace"]), lambda d: True).config == Config(
        "trace", kwargs={"decay": 0.0})


def test_checks_on_degenerate_trees():
    empty_dim = {"a": torch.zeros(0, 2, dtype=torch.float64), "b": None}
    for params in ({}, empty_dim):
        check_pure(trace(), params, params)
        check_state_stable(trace(), params, params)
    check_differentiable(trace(), empty_dim, empty_dim)
    with pytest.raises(ValueError, match="at least one leaf"):
        check_differentiable(trace(), {}, {})
