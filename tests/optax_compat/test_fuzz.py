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
  subnormal values to zero, PyTorch on CPU computes with them.
* A state leaf that is NaN here where Optax's is infinite is accepted: the Adam engine's fused
  kernel forms the first moment with a ``lerp`` (documented in ``adam_engine``; the updates and
  params, NaN in both from the infinite gradient on, are compared as usual).
* Updates and params are compared at the tolerance of the least precise value that feeds them,
  the state's leaves included: a float32 hyper-parameter (a schedule's value in
  ``inject_hyperparams``) gives float64 updates float32's precision, and inside Optax's
  compiled ``lax.cond`` XLA may round that float32 value one ulp away from op-by-op Optax.
* ``KNOWN_OPTAX_QUIRKS`` below: programs on which Optax itself fails where this package returns
  updates (an empty tree reaching ``scale_by_muon``/GaLore/Sophia, whose Optax code indexes a
  tree it assumes non-empty). Both sides still run; only the "Optax raised" outcome is accepted.
"""

from __future__ import annotations

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from hypothesis import HealthCheck, Phase, assume, given, settings

import optax_compat as ox
from optax_compat import testing
from optax_compat._src.building_blocks import tree_math
from optax_compat.testing import state_signature, strategies

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

# Optax fails on an empty tree in these (its code indexes a tree it assumes non-empty).
KNOWN_OPTAX_QUIRKS = ("contrib.scale_by_muon", "contrib.galore", "contrib.scale_by_galore",
                      "contrib.sophia")


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


def _cancelling_centred_variance(config) -> bool:
    """Whether a centred RMS with ``decay < 0.5`` is in ``config`` (see the module docstring)."""
    def name(c):  # inject_hyperparams(rmsprop)(...) holds rmsprop's arguments
        return c.args[0] if c.name == "inject_hyperparams" else c.name

    return any((name(c) == "scale_by_stddev"
                or (name(c) == "rmsprop" and c.kwargs.get("centered", False)))
               and c.kwargs.get("decay", 0.9) < 0.5 for c in _configs(config))


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


def _kernel_moments(ours_leaves, theirs_leaves):
    """Optax's state leaves as arrays, NaN where Optax's are infinite and ours NaN: the Adam
    engine's fused kernel (a ``lerp``) documents that first moment (see the module docstring)."""
    return [np.where(np.isinf(theirs) & torch.isnan(ours).numpy(), np.nan, theirs)
            if isinstance(ours, torch.Tensor) and ours.is_floating_point() else theirs
            for ours, theirs in ((a, np.asarray(b)) for a, b in zip(ours_leaves, theirs_leaves))]


def _compare(ours_trace, theirs_trace, program):
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
        assert state_signature(ours_state) == state_signature(theirs_state), where
        ours_leaves, theirs_leaves = _without_keys(ours_state, theirs_state)
        assert _dtype_names(ours_leaves, True) == _dtype_names(theirs_leaves, False), where
        values = not any("galore" in c.name for c in _configs(program.config))
        if values:
            testing.assert_trees_all_close(ours_leaves, _kernel_moments(ours_leaves, theirs_leaves),
                                           what=f"{where}: state")
        if ours[0] == "step":
            for position, what in ((1, "updates"), (2, "params")):
                assert (_dtype_names(ours[position], True)
                        == _dtype_names(theirs[position], False)), f"{where}: {what} dtypes"
                if values:
                    # The state's leaves (hyper-parameters among them) feed the step: a
                    # float32 learning rate gives float64 updates float32's precision.
                    rtol, atol = testing.tolerance(ours[position], theirs[position],
                                                   ours_leaves)
                    testing.assert_trees_all_close(ours[position], theirs[position], rtol=rtol,
                                                   atol=atol, what=f"{where}: {what}")
    assert len(ours_trace) == len(theirs_trace), f"{program!r}: {ours_trace[-1]!r}"


def _check(program, dtype):
    x64 = dtype == torch.float64
    with warnings.catch_warnings(), jax.enable_x64(x64), ox.config.enable_x64(x64):
        warnings.simplefilter("ignore")
        _compare(_run(program, ox), _run(program, optax), program)


@FUZZ
@given(program=strategies.programs(dtype=torch.float32))
def test_float32_programs_with_x64_off_match_optax(program):
    # A deliberate difference: JAX without x64 silently makes a requested float64 buffer
    # float32; PyTorch honours float64 in either mode.
    assume("torch.float64" not in repr(program.config))
    assume(not _cancelling_centred_variance(program.config))
    assume(not _jax_svd_may_hang(program))
    _check(program, torch.float32)


@FUZZ
@given(program=strategies.programs(dtype=torch.float64))
def test_float64_programs_with_x64_on_match_optax(program):
    assume(not _cancelling_centred_variance(program.config))
    assume(not _jax_svd_may_hang(program))
    _check(program, torch.float64)


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
