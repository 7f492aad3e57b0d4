"""Faults and soak: checkpoints that resume, checkpoints that must be refused, long runs.

* Every top-level alias, checkpointed at step ``K`` with ``optax_compat.checkpoint.save``, resumes
  in a fresh Python process (a new interpreter reading only the files) and ends bit-identical
  to the uninterrupted run.
* A checkpoint of another parameter tree or another optimizer, a truncated file and a corrupted
  file are refused with a clear ``ValueError``, and the running state is left as it was.
* 10,000 steps with random NaN/inf gradients under ``apply_if_finite`` and ``MultiSteps`` keep
  the parameters finite and the process memory flat.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import optax_compat as optax
from optax_compat._runtime import tree_math
from optax_compat._src import base
from optax_compat.testing import make_tree
from tests.optax_compat.test_alias import ALIASES

ROOT = Path(__file__).resolve().parents[2]
K, MORE = 3, 3


def build(name: str) -> base.GradientTransformation:
    """The alias ``name`` with a small learning rate (and a key where it takes one)."""
    if name == "polyak_sgd":
        return optax.polyak_sgd(max_learning_rate=0.1)
    if name == "noisy_sgd":
        return optax.noisy_sgd(0.01, key=0)
    return getattr(optax, name)(learning_rate=0.01)


def gradients(step: int, params: dict) -> dict:
    generator = torch.Generator().manual_seed(1000 + step)
    return tree_math.tree_map(lambda p: torch.randn(p.shape, generator=generator), params)


def run(tx: base.GradientTransformation, params: dict, state: base.OptState,
        steps: range) -> tuple[dict, base.OptState]:
    update = base.with_extra_args_support(tx).update
    for step in steps:
        updates, state = update(gradients(step, params), state, params,
                                value=torch.tensor(1.0 + step))
        params = optax.apply_updates(params, updates)
    return params, state


def resume(directory: Path) -> None:
    """What the fresh process does: load each alias's checkpoint and run the remaining steps."""
    for name in ALIASES:
        tx = build(name)
        params = torch.load(directory / f"{name}-params.pt", weights_only=True)
        state = optax.checkpoint.load(directory / f"{name}-state.pt", tx.init(params))
        params, _ = run(tx, params, state, range(K, K + MORE))
        torch.save(params, directory / f"{name}-resumed.pt")


def test_every_alias_resumes_bit_identically_in_a_fresh_process(tmp_path):
    expected = {}
    for name in ALIASES:
        tx = build(name)
        params = {key: value for key, value in make_tree().items() if key != "bias"}  # sm3: 1-d+
        params, state = run(tx, params, tx.init(params), range(K))
        torch.save(params, tmp_path / f"{name}-params.pt")
        optax.checkpoint.save(state, tmp_path / f"{name}-state.pt")
        expected[name], _ = run(tx, params, state, range(K, K + MORE))
    script = (f"import torch; torch.set_num_threads({torch.get_num_threads()}); "
              "from pathlib import Path; from tests.optax_compat.test_faults import resume; "
              f"resume(Path({str(tmp_path)!r}))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (
        str(ROOT), os.environ.get("PYTHONPATH"))))}
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True, timeout=300,
                   capture_output=True)
    for name in ALIASES:
        resumed = torch.load(tmp_path / f"{name}-resumed.pt", weights_only=True)
        ours, theirs = tree_math.leaves(resumed), tree_math.leaves(expected[name])
        assert len(ours) == len(theirs)
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True)), name


@pytest.mark.parametrize("tx", [
    optax.masked(optax.adam(0.01), {"bias": False, "layer": {"w": True, "b": False},
                                    "pair": (True, False), "empty": None}),
    optax.inject_hyperparams(optax.adamw)(learning_rate=optax.cosine_decay_schedule(0.1, 10)),
    optax.MultiSteps(optax.sgd(0.1, momentum=0.9), every_k_schedule=3).gradient_transformation(),
    optax.contrib.schedule_free_adamw(0.01),
], ids=["masked", "inject_hyperparams", "MultiSteps", "schedule_free"])
def test_raw_states_load_with_weights_only(tx):
    params = make_tree()
    state = tx.init(params)
    for step in range(2):
        grads = gradients(step, params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    buffer = io.BytesIO()
    torch.save(optax.checkpoint.state_to_dict(state), buffer)
    with pytest.raises(pickle.UnpicklingError, match=r"[Ww]eights only load failed"):
        torch.load(io.BytesIO(_pickled(state)), weights_only=True)
    buffer.seek(0)
    loaded = optax.checkpoint.state_from_dict(tx.init(params), torch.load(buffer,
                                                                          weights_only=True))
    assert type(loaded) is type(state)
    assert_unchanged(loaded, snapshot(state))


def _pickled(state) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


# ----------------------------------------------------------------------------------------------
# Checkpoints that must be refused.


def adam_run() -> tuple[base.GradientTransformation, dict, base.OptState]:
    tx = optax.adam(0.01)
    params = make_tree()
    params, state = run(tx, params, tx.init(params), range(2))
    return tx, params, state


def snapshot(state):
    return [t.clone() for t in tree_math.leaves(state)]


def assert_unchanged(state, before):
    after = tree_math.leaves(state)
    assert len(after) == len(before)
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))


def saved(state) -> bytes:
    buffer = io.BytesIO()
    optax.checkpoint.save(state, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(("source", "message"), [
    ("another tree", r"state\[0\].mu: expected keys \['bias', 'empty', 'layer', 'pair'\], "
                     r"got keys \['extra', 'layer'\]"),
    ("another optimizer", "state.*expected a ScaleByAdamState, got TraceState"),
    ("another dtype", "expected a torch.float32 tensor of shape"),
])
def test_checkpoint_of_something_else_is_refused(source, message):
    tx, params, state = adam_run()
    before = snapshot(state)
    if source == "another tree":
        other = {"layer": params["layer"], "extra": torch.zeros(3)}
        file = saved(optax.adam(0.01).init(other))
    elif source == "another optimizer":
        file = saved(optax.sgd(0.01, momentum=0.9).init(params))
    else:
        file = saved(tx.init(tree_math.tree_map(lambda p: p.double(), params)))
    with pytest.raises(ValueError, match=message):
        optax.checkpoint.load(io.BytesIO(file), tx.init(params))
    assert_unchanged(state, before)


def test_truncated_checkpoint_is_refused(tmp_path):
    tx, params, state = adam_run()
    before = snapshot(state)
    path = tmp_path / "state.pt"
    optax.checkpoint.save(state, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="not a readable optimizer checkpoint"):
        optax.checkpoint.load(path, tx.init(params))
    assert_unchanged(state, before)


def test_corrupted_checkpoint_is_refused_never_loaded_wrong():
    tx, params, state = adam_run()
    before = snapshot(state)
    data = saved(state)
    mu = state[0].mu["layer"]["w"].numpy().tobytes()
    inside_tensor = data.index(mu) + len(mu) // 2
    refused = 0
    for position in [inside_tensor, *range(0, len(data), 61)]:
        corrupted = bytearray(data)
        corrupted[position] ^= 0x5A
        try:
            loaded = optax.checkpoint.load(io.BytesIO(bytes(corrupted)), tx.init(params))
        except ValueError as error:
            assert "corrupted" in str(error)
            refused += 1
        else:  # a byte the format does not read (zip padding): the state is intact
            assert position != inside_tensor
            assert_unchanged(loaded, before)
    assert refused > 0
    assert_unchanged(state, before)


# ----------------------------------------------------------------------------------------------
# Soak: 10,000 steps of gradients that are often NaN or inf.

SOAK_STEPS = 10_000


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_soak_with_non_finite_gradients_keeps_params_finite_and_memory_flat():
    # apply_if_finite outside: a non-finite gradient never reaches MultiSteps' accumulator
    # (inside, Optax's accumulator keeps a NaN forever: it is reset by multiplying by 0).
    tx = optax.apply_if_finite(
        optax.MultiSteps(optax.adam(1e-2), every_k_schedule=4).gradient_transformation(),
        max_consecutive_errors=50)
    generator = torch.Generator().manual_seed(0)
    params = {"w": torch.randn(4, 4, generator=generator), "b": torch.zeros(4)}
    state = tx.init(params)
    poison = torch.tensor([math.nan, math.inf, -math.inf])
    kinds = torch.randint(0, 10, (SOAK_STEPS,), generator=generator).tolist()
    noise = torch.randn(SOAK_STEPS, 4, generator=generator)
    baseline = 0
    for step in range(SOAK_STEPS):
        grads = {"w": params["w"] * 0.1 + noise[step], "b": noise[step].clone()}
        if kinds[step] < 3:  # 30% of the steps: a NaN, +inf or -inf somewhere
            grads["b"][step % 4] = poison[kinds[step]]
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        if step == 1_000:
            baseline = resident_bytes()
    growth = resident_bytes() - baseline
    print(f"RSS growth over the last {SOAK_STEPS - 1_000} steps: {growth / 2**20:.2f} MiB")
    assert all(torch.isfinite(p).all() for p in params.values())
    assert int(state.total_notfinite) == sum(kind < 3 for kind in kinds)
    assert int(state.inner_state.gradient_step) == (SOAK_STEPS - int(state.total_notfinite)) // 4
    assert params["w"].abs().max() < 1.0  # it trained: w decays towards the noise's mean 0
    assert growth < 16 * 2**20
