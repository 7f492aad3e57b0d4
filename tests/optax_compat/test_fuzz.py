"""Differential fuzzer: random optimizer programs run in real Optax and here, step by step.

Programs come from ``optax_compat.testing.strategies.programs`` (aliases, transforms, schedules
and combinators). Each runs ``init`` and three ``update`` + ``apply_updates`` steps in both
libraries, float32 programs with JAX's x64 and ``optax_compat.config`` off, float64 programs
with both on, and must agree on: raised or not, updates, params, state leaves (values and
dtypes) and state NamedTuple class names.

Budget: 300 programs in CI (the ``ci`` profile, derandomized: the same programs every run).
Under the exploring ``long`` profile (``tests/conftest.py``) it runs 5,000 programs (2,500 per
dtype), ``OPTAX_COMPAT_FUZZ_EXAMPLES`` sets another total, and ``--hypothesis-seed`` picks which
programs, so chunks with different seeds add up to a long run::

    OPTAX_COMPAT_FUZZ_EXAMPLES=500 python -m pytest -q -n 0 --hypothesis-profile=long \
        --hypothesis-seed=1 --hypothesis-show-statistics tests/optax_compat/test_fuzz.py

(the statistics count the programs run; those filtered out below are reported as invalid).

The ``test_fused_step_*`` tests run the same grammar through
``optax_compat.fused_step(..., backend="aot_eager")``: of the programs drawn, they keep those
that run on flat buffers, that Optax runs, and that ``fused_step`` accepts (the statistics'
events say how many), and compare params and state after every in-place step with Optax's
trace, the state as runs of one dtype (flat buffers hold in one leaf what Optax keeps per
parameter). ``test_stacked_fused_step_*`` does the same for the programs that only the
stacked layout runs (per-leaf transformations under ``vmap``), comparing the params. Each
program compiles, so their budget is a tenth of the above per dtype (15 in CI).

Optax quirks that the fuzzer steps around, each for a reason:

* float64 dtype arguments (``mu_dtype=float64``) in float32 programs are not drawn: JAX without
  x64 silently makes such buffers float32, PyTorch honours float64 in either mode (deliberate).
* centred RMS (``scale_by_stddev``, ``rmsprop(centered=True)``) with ``decay < 0.5`` is not
  drawn: its variance ``nu - mu**2`` cancels (exactly 0 at the first step with ``decay=0``), and
  in compiled JAX code (the ``lax.cond`` of ``apply_if_finite``, ``MultiSteps``, or ``jit``)
  XLA fuses it into a multiply-add that returns the rounding error of ``g**2`` instead, so
  Optax's own numbers differ by up to 2e-4 between op-by-op and compiled runs.
* GaLore gets no infinite gradients: JAX's CPU SVD does not return on some matrices with an
  infinite entry (a 3 x 3 one), so Optax hangs (NaN gradients are drawn: both give NaN).
* Optax raising because the branches of its ``lax.cond`` differ in type (in
  ``apply_if_finite``, ``MultiSteps``, ``conditionally_*``: a state that changes dtype at
  ``update``, ``mu_dtype`` narrower than the gradients without a cast back; updates shaped
  unlike the gradients, ``(1,)`` for a 0-d leaf), where this package returns updates.
* GaLore's values are not compared (outcome, state classes and dtypes are): singular
  vectors are defined up to sign, and torch's LAPACK (MKL) and jaxlib's (OpenBLAS) pick
  different signs and roundings; ``test_contrib_galore.py`` compares them up to sign.
* Hyper-parameters below float32's smallest normal number are drawn as 0: XLA flushes such
  subnormal values to zero, PyTorch on CPU computes with them. For the same reason params and
  gradients below the square root of the smallest normal number are drawn as 0 (the
  strategy's ``min_magnitude``): ``(1 - b1) * g`` for ``g`` near float32's smallest normal
  is 0 in JAX, op by op and under ``jax.jit``, and -7.8e-39 in PyTorch, and ``lion``'s sign
  of it is then 0 against -1.
* Updates and params are compared at the tolerance of the least precise value that feeds them,
  the state's leaves and the schedules' values included: a float32 hyper-parameter (a
  schedule's value at the int32 count, in the state of ``inject_hyperparams`` or not) gives
  float64 updates float32's precision, and inside Optax's compiled ``lax.cond`` XLA may round
  that float32 value one ulp away from op-by-op Optax (and computes a float32 cosine a few
  ulps away from PyTorch's).
* The interpolating schedules with a cosine (``cosine_onecycle_schedule``,
  ``piecewise_interpolate_schedule('cosine', ...)``) count as float32 values: in 64-bit mode
  they are float64, interpolated with the cosine of a float32 fraction (the int32 count over
  weakly typed int bounds, in Optax too), and PyTorch's float32 cosine is not always XLA's:
  ``cos(2.5132742f)`` is -0.80901700 here, -0.80901706 in XLA, so the one-cycle value at count
  9 of ``cosine_onecycle_schedule(10, 0.306, 0.5, 10, 1e4)`` is 0.0292231664 against
  0.0292231573.
* Likewise state leaves are compared at the tolerance of the least precise of them and of
  the schedules' values (each piece of a ``join_schedules`` included: the joined value has
  the precision of the piece in force), as state such as MADGRAD's accumulates the learning
  rate; and the state of schedule-free transforms (their averaging weights come from their
  warmup schedule's float32 value) at float32's tolerance: in a float64 program,
  Optax gives 5.418682246e-4 under ``lax.cond`` and 5.418683113e-4 (ours) with
  ``jax.disable_jit()``.
* A trust ratio (``lamb``, ``lars``, ``scale_by_trust_ratio``) is compared up to the step
  after which a params leaf is exactly 0 on one side and not on the other: its ratio
  ``|param| / |update|`` switches to 1 at a zero norm, so a one-ulp difference (a learning
  rate of 1 makes ``param - update`` cancel) changes the next steps entirely. Optax's own
  ``lamb`` does so between op-by-op and ``jax.jit`` runs (params 0 vs 7e-9, then updates
  0.49 vs 5e-9).
* ``MultiSteps`` is compared up to the first step with a value (update or state) that is NaN
  here and 0 in Optax: Optax masks with a product by the boolean ``emit``
  (``emit * updates``, ``(1 - emit) * acc_grads``), which is NaN for an infinite value op by
  op, as here, while XLA compiles it (in ``lax.cond``, or under ``jax.jit``) into a select
  that gives 0. ``apply_if_finite(MultiSteps(sgd(0.1), 3), 1)`` with gradients -inf, -inf,
  1.2: updates 0, NaN, NaN here and in Optax under ``jax.disable_jit()``; 0, 0, 0 compiled.
* Muon's float32 updates and params are compared at rtol 1e-4, atol 1e-5, as in
  ``test_contrib_muon.py``: its five Newton-Schulz steps are fifteen float32 matrix products
  whose accumulation order differs between MKL and XLA (1.5e-5 apart seen).
* A float32 program whose updates or state differ from Optax's at float32's tolerance is
  compared again with Optax run in float64 (x64 on, the same inputs widened) and rounded to
  float32; if ours agree with that, the difference is Optax's float32 rounding, which the
  tolerance model cannot see on an ill-conditioned program, and the program passes (noted as
  a hypothesis event). Seen: ``MultiSteps(named_chain(optimistic_gradient_descent,
  scale_by_adadelta, contrib.scale_by_acprop(eps=3.4e-9)))``, where Optax's float32 update
  at step 1 is 1.5e-8 for an exact 2.4e-18 (ours -0.0) and its step-2 update 67533 against
  95433.15 (ours, and Optax's in float64).
* ``KNOWN_OPTAX_QUIRKS`` below: programs on which Optax itself fails where this package returns
  updates (an empty tree reaching ``scale_by_muon``/GaLore/Sophia, whose Optax code indexes a
  tree it assumes non-empty). Both sides still run; only the "Optax raised" outcome is accepted.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from hypothesis import HealthCheck, Phase, assume, event, example, given, settings

import optax_compat as ox
from optax_compat import _runtime as bb
from optax_compat import testing
from optax_compat._runtime import tree_math
from optax_compat.testing import state_signature, strategies
from optax_compat.testing._program_strategies import MultiStepsConfig

FUZZ_LONG_EXAMPLES = 5_000


def _budget() -> int:
    """Programs per dtype: half of ``OPTAX_COMPAT_FUZZ_EXAMPLES`` if set, else 150 in CI and
    2,500 under an exploring (not derandomized) profile."""
    if "OPTAX_COMPAT_FUZZ_EXAMPLES" in os.environ:
        return int(os.environ["OPTAX_COMPAT_FUZZ_EXAMPLES"]) // 2
    return 150 if settings.default.derandomize else FUZZ_LONG_EXAMPLES // 2


# No shrinking: a counter-example prints as the code of its program already, and shrinking a
# program that runs JAX op by op costs minutes.
FUZZ = settings(max_examples=_budget(), deadline=None,
                suppress_health_check=list(HealthCheck), print_blob=True,
                phases=(Phase.explicit, Phase.reuse, Phase.generate))

# The fused path compiles each program (``aot_eager``: 2 to 7 s of CPU each): a twentieth as
# many (7 in CI; 125 under the exploring profile).
FUSED = settings(FUZZ, max_examples=max(1, _budget() // 20))

# Optax fails on an empty tree in these (its code indexes a tree it assumes non-empty).
KNOWN_OPTAX_QUIRKS = ("contrib.scale_by_muon", "contrib.galore", "contrib.scale_by_galore",
                      "contrib.sophia")

# Their ratio |param| / |update| switches to 1 where a leaf's params are exactly 0.
TRUST_RATIOS = ("scale_by_trust_ratio", "lamb", "lars")


def _configs(value):
    """Every configuration nested in ``value`` (itself included)."""
    if isinstance(value, strategies.Config):
        yield value
        value = (*value.args, *value.kwargs.values())
    if isinstance(value, dict):
        value = tuple(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _configs(item)


def _name(config) -> str:
    """The transformation's name (``inject_hyperparams(rmsprop)(...)`` holds rmsprop's)."""
    return config.args[0] if config.name == "inject_hyperparams" else config.name


def _cancelling_centred_variance(config) -> bool:
    """Whether a centred RMS with ``decay < 0.5`` is in ``config`` (see the module docstring)."""
    return any((_name(c) == "scale_by_stddev"
                or (_name(c) == "rmsprop" and c.kwargs.get("centered", False)))
               and c.kwargs.get("decay", 0.9) < 0.5 for c in _configs(config))


def _trust_ratio_switch_split(program, ours_params, theirs_params) -> bool:
    """Whether a trust ratio meets a params leaf that is exactly 0 on one side only (see the
    module docstring)."""
    return (any(_name(c) in TRUST_RATIOS for c in _configs(program.config))
            and any(bool((a == 0).all()) != bool((np.asarray(b) == 0).all())
                    for a, b in zip(tree_math.leaves(ours_params),
                                    jax.tree_util.tree_leaves(theirs_params))))


def _jax_svd_may_hang(program) -> bool:
    """Whether GaLore meets an infinite gradient (see the module docstring)."""
    return (any("galore" in c.name for c in _configs(program.config))
            and any(leaf.isinf().any() for grads in program.grads
                    for leaf in tree_math.leaves(grads)))


def _to_jax(tree):
    return tree_math.tree_map(lambda x: jnp.asarray(x.detach().numpy()), tree)


def _dtype_names(tree, torch_side):
    leaves = tree_math.leaves(tree) if torch_side else jax.tree_util.tree_leaves(tree)
    return [str(getattr(leaf, "dtype", type(leaf).__name__)).replace("torch.", "")
            for leaf in leaves]


def _without_keys(ours, theirs):
    """State leaves minus random keys (int64 seeds here, JAX keys there)."""
    ours_leaves, theirs_leaves = tree_math.leaves(ours), jax.tree_util.tree_leaves(theirs)
    assert len(ours_leaves) == len(theirs_leaves), (len(ours_leaves), len(theirs_leaves))
    kept = [(a, b) for a, b in zip(ours_leaves, theirs_leaves)
            if not str(getattr(b, "dtype", "")).startswith("key")]
    return [a for a, _ in kept], [b for _, b in kept]


def _run(program, lib):
    """``[("init", state), ("step", updates, params, state), ...]`` or the exception raised."""
    torch_side = lib is ox
    params = program.params if torch_side else _to_jax(program.params)
    if program.lookahead:
        params = lib.LookaheadParams.init_synced(params)
    trace = []
    try:
        tx = program.config.build(lib)
        state = tx.init(params)
        trace.append(("init", state))
        for grads in program.grads:
            grads = grads if torch_side else _to_jax(grads)
            updates, state = tx.update(grads, state, params)
            params = lib.apply_updates(params, updates)
            trace.append(("step", updates, params, state))
    except Exception as error:
        trace.append(("raised", error))
    return trace


def _run_fused(program, tx):
    """``_run``'s trace of ``optax_compat.fused_step(tx, ...)``: params and state copied after
    each in-place step, no updates (``None``). ``tx`` must be flat-safe."""
    snapshot = lambda tree: tree_math.tree_map(torch.clone, tree)
    params = snapshot(program.params)  # fused_step re-points the leaves it is given
    step = ox.fused_step(tx, params, backend="aot_eager")
    trace = [("init", snapshot(step.state))]
    for grads in program.grads:
        step(grads)
        trace.append(("step", None, snapshot(params), snapshot(step.state)))
    return trace


def _dtype_runs(leaves, concatenate):
    """Each run of consecutive leaves of one dtype, ravelled and concatenated: the layout-free
    view of a state (on flat buffers one leaf holds what Optax keeps in one per parameter)."""
    runs = itertools.groupby(leaves, key=lambda leaf: _dtype_names([leaf], False)[0])
    return [concatenate([leaf.reshape(-1) for leaf in run]) for _, run in runs]


def _state_leaves(ours_state, theirs_state, flat):
    """The state leaves to compare: per leaf, or on flat buffers per dtype run."""
    if not flat:
        return _without_keys(ours_state, theirs_state)
    return (_dtype_runs(tree_math.leaves(ours_state), torch.cat),
            _dtype_runs(list(map(np.asarray, jax.tree_util.tree_leaves(theirs_state))),
                        np.concatenate))


def _value_for_tolerance(schedule, count):
    """``schedule``'s value at ``count``, as float32 where a float32 cosine makes it (see the
    module docstring)."""
    value = bb.as_weak(schedule.build(ox)(count))
    float32_cosine = (schedule.name == "cosine_onecycle_schedule"
                      or schedule.kwargs.get("interpolate_type") == "cosine")
    return value.float() if float32_cosine else value


def _schedule_values(program):
    """Each schedule's value at an int32 count: float32 for most, even in 64-bit mode, and
    of float32's precision where a float32 cosine makes it. The pieces of a
    ``join_schedules`` count too: the joined value takes the widest piece's dtype and the
    precision of the piece in force."""
    count = torch.zeros((), dtype=torch.int32)
    return [_value_for_tolerance(piece, count) for c in _configs(program.config)
            for value in (*c.args, *c.kwargs.values())
            if isinstance(value, strategies.DescribedSchedule)
            for piece in _configs(value.config)]


def _multisteps_zero_times_inf(program, ours_leaves, theirs_leaves) -> bool:
    """Whether a ``MultiSteps`` program has a value that is NaN here and 0 in Optax (see the
    module docstring)."""
    return (any(c.name == "MultiSteps" for c in _configs(program.config))
            and any(isinstance(a, torch.Tensor) and a.is_floating_point()
                    and bool((torch.isnan(a).numpy() & (np.asarray(b) == 0)).any())
                    for a, b in zip(ours_leaves, theirs_leaves)))


def _muon_tolerances(program):
    """``testing.tolerance``'s overrides for a program with Muon (see the module docstring)."""
    if any("muon" in c.name for c in _configs(program.config)):
        return {"rtol": {torch.float32: 1e-4}, "atol": {torch.float32: 1e-5}}
    return {}


def _compare(ours_trace, theirs_trace, program, flat=False, state=True):
    """Asserts that two traces agree (the module docstring says on what); ``flat``: ours comes
    from :func:`_run_fused` (no updates, the state on flat buffers); ``state=False``: the
    states are not compared (stacked buffers hold them in another layout)."""
    for index, (ours, theirs) in enumerate(zip(ours_trace, theirs_trace)):
        where = f"{program!r}\nat entry {index} ({ours[0]} vs Optax's {theirs[0]})"
        if theirs[0] == "raised" and ours[0] != "raised":
            if (any(name in repr(program.config) for name in KNOWN_OPTAX_QUIRKS)
                    or "cond branches must have equal" in str(theirs[-1])):
                return
        assert ours[0] == theirs[0], f"{where}: {ours[-1]!r} / {theirs[-1]!r}"
        if ours[0] == "raised":
            return
        ours_state, theirs_state = ours[-1], theirs[-1]
        ours_leaves, theirs_leaves = [], []
        if state:
            assert state_signature(ours_state) == state_signature(theirs_state), where
            ours_leaves, theirs_leaves = _state_leaves(ours_state, theirs_state, flat)
        if ours[0] == "step" and ours[1] is not None:
            compared = (ours_leaves + tree_math.leaves(ours[1]),
                        theirs_leaves + jax.tree_util.tree_leaves(theirs[1]))
            if _multisteps_zero_times_inf(program, *compared):
                return
        assert _dtype_names(ours_leaves, True) == _dtype_names(theirs_leaves, False), where
        values = not any("galore" in c.name for c in _configs(program.config))
        if values:
            # Schedule-free's averaging weights come from its float32 warmup schedule value;
            # other state accumulates the schedules' values (MADGRAD's learning rate).
            rtol, atol = (testing.tolerance(torch.zeros((), dtype=torch.float32))
                          if any("schedule_free" in c.name for c in _configs(program.config))
                          else testing.tolerance(ours_leaves, _schedule_values(program)))
            testing.assert_trees_all_close(ours_leaves, theirs_leaves, rtol=rtol, atol=atol,
                                           what=f"{where}: state")
        if ours[0] == "step":
            for position, what in ((1, "updates"), (2, "params")):
                if ours[position] is None:
                    continue
                assert (_dtype_names(ours[position], True)
                        == _dtype_names(theirs[position], False)), f"{where}: {what} dtypes"
                if values:
                    # The state's leaves (hyper-parameters among them) and the schedules feed
                    # the step: a float32 learning rate gives float64 updates float32's
                    # precision.
                    rtol, atol = testing.tolerance(ours[position], theirs[position],
                                                   ours_leaves, _schedule_values(program),
                                                   **_muon_tolerances(program))
                    testing.assert_trees_all_close(ours[position], theirs[position], rtol=rtol,
                                                   atol=atol, what=f"{where}: {what}")
            if _trust_ratio_switch_split(program, ours[2], theirs[2]):
                return
    assert len(ours_trace) == len(theirs_trace), f"{program!r}: {ours_trace[-1]!r}"


def _check(program, dtype):
    x64 = dtype == torch.float64
    with warnings.catch_warnings(), jax.enable_x64(x64), ox.config.enable_x64(x64):
        warnings.simplefilter("ignore")
        ours = _run(program, ox)
        try:
            _compare(ours, _run(program, optax), program)
        except AssertionError:
            if x64 or not _matches_optax_in_float64(ours, program):
                raise
            event("float32 Optax off its float64 values, which ours match")


def _narrowed(value):
    """``value`` with its float64 (complex128) JAX arrays rounded to float32 (complex64)."""
    def narrow(x):
        if isinstance(x, jax.Array) and x.dtype in (jnp.float64, jnp.complex128):
            return x.astype(jnp.float32 if x.dtype == jnp.float64 else jnp.complex64)
        return x
    return jax.tree_util.tree_map(narrow, value)


def _matches_optax_in_float64(ours_trace, program) -> bool:
    """Whether our float32 trace agrees with Optax's on the program widened to float64 (x64
    on), rounded back to float32: then a float32 mismatch is Optax's rounding (see the module
    docstring)."""
    wide = lambda tree: tree_math.tree_map(torch.Tensor.double, tree)
    widened = dataclasses.replace(program, params=wide(program.params),
                                  grads=tuple(map(wide, program.grads)))
    with jax.enable_x64(True):
        theirs = [(entry[0], *map(_narrowed, entry[1:])) if entry[0] != "raised" else entry
                  for entry in _run(widened, optax)]
    try:
        _compare(ours_trace, theirs, program)
    except AssertionError:
        return False
    return True


def _assume_comparable(program, dtype):
    """Leaves out the programs of the module docstring's quirks."""
    # A deliberate difference: JAX without x64 silently makes a requested float64 buffer
    # float32; PyTorch honours float64 in either mode.
    assume(dtype == torch.float64 or "torch.float64" not in repr(program.config))
    assume(not _cancelling_centred_variance(program.config))
    assume(not _jax_svd_may_hang(program))


def _check_fused(program, dtype, layout=bb.FLAT):
    """Compares ``fused_step`` with Optax on ``program`` if ``layout`` is the first it allows,
    Optax runs it, and ``fused_step`` accepts it (else rejects it, noting why as a hypothesis
    event). The stacked layout's states are not compared, its params are."""
    _assume_comparable(program, dtype)
    x64 = dtype == torch.float64
    with warnings.catch_warnings(), jax.enable_x64(x64), ox.config.enable_x64(x64):
        warnings.simplefilter("ignore")
        try:  # whether building raises as in Optax is the programs tests' business
            tx = program.config.build(ox)
        except Exception:
            tx = None
        fits = tx is not None and bb.why_not(tx, layout) is None
        if not fits or (layout == bb.STACKED and bb.why_not(tx, bb.FLAT) is None):
            event(f"not run {layout}")
            assume(False)
        theirs = _run(program, optax)
        if theirs[-1][0] == "raised":
            event("Optax raised")
            assume(False)
        try:
            ours = _run_fused(program, tx)
        except ValueError as error:
            if not str(error).startswith("fused_step:"):
                raise
            event("refused by fused_step")
            assume(False)
        event(f"ran on the fused path, {layout}")
        _compare(ours, theirs, program, flat=True, state=layout == bb.FLAT)


def _regression(config):
    """A float64 program on a fixed tree, three steps."""
    generator = torch.Generator().manual_seed(0)
    draw = lambda shape: torch.randn(shape, dtype=torch.float64, generator=generator)
    params = {"a": draw(3), "b": draw((2, 2))}
    grads = tuple({key: draw(leaf.shape) for key, leaf in params.items()} for _ in range(3))
    return strategies.Program(config, params, grads)


def _joined(schedules, boundaries):
    """``join_schedules`` as the grammar draws it."""
    return strategies.DescribedSchedule(strategies.Config(
        "join_schedules", kwargs={"schedules": schedules, "boundaries": boundaries}))


ONE_CYCLE = strategies.Config("cosine_onecycle_schedule", kwargs={
    "transition_steps": 10, "peak_value": 0.306, "pct_start": 0.5, "div_factor": 10,
    "final_div_factor": 1e4})

# Programs that mismatched in 64-bit mode (issue 37), run first under every profile: the
# one-cycle schedule at counts 7 to 9 (its float32 cosine); fromage's float32 weight decay
# ``1 / sqrt(1 + lr**2) - 1``; MADGRAD's rate from a strongly typed float64 schedule, which
# the float32 ``sqrt(count + 1)`` made float32.
REGRESSIONS_FLOAT64 = (
    _regression(strategies.Config("sgd", kwargs={"learning_rate": _joined(
        [strategies.Config("constant_schedule", (0.1,)), ONE_CYCLE], [-7])})),
    _regression(strategies.Config("fromage", args=(strategies.DescribedSchedule(
        strategies.Config("linear_schedule", (0.0302, 0.0604, 6, 3))),))),
    _regression(strategies.Config("partition", args=(
        {"x": strategies.Config("contrib.madgrad", kwargs={"learning_rate": _joined(
            [ONE_CYCLE, strategies.Config("constant_schedule", (0.05,))], [5])}),
         "y": strategies.Config("sgd", kwargs={"learning_rate": 0.1})},
        {"a": "x", "b": "y"}))),
)


# Found by the long profile (seed 28): with ``b1 <= 0.5`` torch's fused Adam kernel gave NaN
# where Optax's first moment is infinite, at the first (infinite) gradient that
# ``apply_if_finite`` lets through after two non-finite steps.
REGRESSIONS_FLOAT32 = (
    strategies.Program(
        strategies.Config("apply_if_finite", args=(strategies.Config("flatten", args=(
            strategies.Config("adamw", kwargs={"learning_rate": 0.237, "b1": 0.2766}),)), 2)),
        {"k": torch.tensor(0.3631), "c": torch.tensor(-1.0662),
         "i": torch.tensor([0.85, -0.1453])},
        tuple({"k": torch.tensor(k), "c": torch.tensor(c), "i": torch.tensor(i)} for k, c, i in (
            (1.9171, -math.inf, [-math.inf, math.inf]), (1.7713, -math.inf, [math.inf, math.nan]),
            (1.9141, 0.2741, [math.inf, 0.0])))),
    # Optax's float32 rounding: ours match its float64 values (see the module docstring).
    strategies.Program(
        MultiStepsConfig("MultiSteps", args=(strategies.Config("named_chain", args=(
            ("t0", strategies.Config("optimistic_gradient_descent", kwargs={
                "learning_rate": 0.5556226871250304, "alpha": 0.0, "beta": 0.8845071911483371})),
            ("t1", strategies.Config("scale_by_adadelta", kwargs={"rho": 0.6428581812889484})),
            ("t2", strategies.Config("contrib.scale_by_acprop", kwargs={
                "b2": 0.5, "eps": 3.3917376889954383e-09})))),),
            kwargs={"every_k_schedule": 1, "use_grad_mean": True}),
        torch.tensor(-1.5), (torch.tensor(0.9964), torch.tensor(1e-12), torch.tensor(0.8417))),
)


def _with_examples(programs):
    def decorate(test):
        for program in programs:
            test = example(program=program)(test)
        return test
    return decorate


@FUZZ
@given(program=strategies.programs(dtype=torch.float32))
@_with_examples(REGRESSIONS_FLOAT32)
def test_float32_programs_with_x64_off_match_optax(program):
    _assume_comparable(program, torch.float32)
    _check(program, torch.float32)


@FUZZ
@given(program=strategies.programs(dtype=torch.float64))
@_with_examples(REGRESSIONS_FLOAT64)
def test_float64_programs_with_x64_on_match_optax(program):
    _assume_comparable(program, torch.float64)
    _check(program, torch.float64)


@FUSED
@given(program=strategies.programs(dtype=torch.float32))
def test_fused_step_in_float32_with_x64_off_matches_optax(program):
    _check_fused(program, torch.float32)


@FUSED
@given(program=strategies.programs(dtype=torch.float64))
def test_fused_step_in_float64_with_x64_on_matches_optax(program):
    _check_fused(program, torch.float64)


@FUSED
@given(program=strategies.programs(dtype=torch.float32))
def test_stacked_fused_step_in_float32_matches_optax(program):
    _check_fused(program, torch.float32, bb.STACKED)


def test_grammar_covers_the_combinators_and_every_drawable_transform():
    names = strategies.grammar_names()
    assert {"chain", "named_chain", "masked", "partition", "inject_hyperparams", "MultiSteps",
            "apply_if_finite", "lookahead", "flatten", "freeze", "conditionally_mask",
            "conditionally_transform"} <= set(names["combinators"])
    assert {"adam", "sgd", "scale_by_adam", "clip_by_global_norm"} <= set(names["transforms"])
    assert set(names["injectable"]) <= set(names["transforms"])


@pytest.mark.parametrize("lookahead", [False, True])
def test_a_known_program_runs_identically(lookahead):
    """A fixed program through the same machinery, so a broken runner cannot pass vacuously."""
    params = {"w": torch.linspace(-1, 1, 6).reshape(2, 3), "b": [torch.ones(2), None]}
    grads = tuple(tree_math.tree_map(lambda x, s=s: x * (0.5 + s), params) for s in range(3))
    config = strategies.Config("chain", args=(
        strategies.Config("clip_by_global_norm", kwargs={"max_norm": 1.0}),
        strategies.Config("adam", kwargs={"learning_rate": 0.1})))
    if lookahead:
        config = strategies.Config("lookahead", args=(config, 2, 0.5))
    program = strategies.Program(config, params, grads, lookahead)
    ours, theirs = _run(program, ox), _run(program, optax)
    assert [entry[0] for entry in ours] == ["init", "step", "step", "step"]
    _compare(ours, theirs, program)


def test_a_float32_mismatch_passes_only_where_ours_match_optax_in_float64():
    program = REGRESSIONS_FLOAT32[1]
    with warnings.catch_warnings(), jax.enable_x64(False), ox.config.enable_x64(False):
        warnings.simplefilter("ignore")
        ours = _run(program, ox)
        with pytest.raises(AssertionError, match="updates"):  # Optax's float32 rounding
            _compare(ours, _run(program, optax), program)
        assert _matches_optax_in_float64(ours, program)
        off = [(entry[0], entry[1] * 1.01, *entry[2:]) if entry[0] == "step" else entry
               for entry in ours]
        assert not _matches_optax_in_float64(off, program)
