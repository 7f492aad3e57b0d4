"""reduce_on_plateau against real Optax."""

import optax
import pytest
import torch

from optax_compat.contrib import _reduce_on_plateau
from optax_compat.testing import compare_with_optax, jit_optax, make_tree

# Improves, plateaus (reductions), improves again, then plateaus down to the minimum scale.
VALUES = [5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 3.0, 3.0, 2.9999, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0,
          3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def _values(dtype):
    return lambda step: {"value": torch.tensor(VALUES[step], dtype=dtype)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("kwargs", [
    {"patience": 2},
    {"factor": 0.5, "patience": 1, "cooldown": 2, "min_scale": 0.2},
    {"factor": 0.5, "patience": 1, "rtol": 0.0, "atol": 0.5, "accumulation_size": 3},
    {"factor": 0.3, "patience": 2, "rtol": 0.1, "cooldown": 1, "accumulation_size": 2},
], ids=["patience", "cooldown_min_scale", "atol_accumulate", "rtol_cooldown_accumulate"])
def test_reduce_on_plateau_matches_optax(dtype, kwargs):
    ours, _ = compare_with_optax(
        _reduce_on_plateau.reduce_on_plateau(**kwargs),
        lambda: jit_optax(optax.contrib.reduce_on_plateau(**kwargs)), dtype, steps=len(VALUES),
        extra_args=_values(dtype))
    # The sequence is built so that every configuration reduces the scale at least once.
    assert float(ours.scale) < 1.0


def test_reduce_on_plateau_state_dtypes_and_purity():
    params = {"low": torch.ones(2), "high": torch.ones(3, dtype=torch.float64)}
    tx = _reduce_on_plateau.reduce_on_plateau(patience=1)
    state = tx.init(params)
    assert state.scale.dtype == torch.float32 and state.best_value.dtype == torch.float64
    assert all(c.dtype == torch.int32 for c in (state.count, state.plateau_count,
                                                state.cooldown_count))
    grads = make_tree(seed=3)
    before = torch.clone(grads["layer"]["w"])
    updates, _ = tx.update(grads, tx.init(make_tree()), value=torch.tensor(2.0))
    assert torch.equal(grads["layer"]["w"], before)
    torch.testing.assert_close(updates["layer"]["w"], before)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"factor": 1.0}, "Factor"), ({"factor": 0.0}, "Factor"), ({"rtol": -1.0}, "non-negative"),
    ({"rtol": 0.0, "atol": 0.0}, "At least one"), ({"rtol": 1.5}, "less than or equal"),
])
def test_reduce_on_plateau_rejects_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _reduce_on_plateau.reduce_on_plateau(**kwargs)


def test_reduce_on_plateau_does_not_read_tensors_on_the_host(monkeypatch):
    tx = _reduce_on_plateau.reduce_on_plateau(patience=1, cooldown=1)
    state = tx.init(make_tree())

    def refuse(self, *args):
        raise AssertionError("host sync in update")

    monkeypatch.setattr(torch.Tensor, "__bool__", refuse)
    for value in (3.0, 3.0, 3.0):
        _, state = tx.update(make_tree(seed=1), state, value=torch.tensor(value))
    monkeypatch.undo()
    assert float(state.scale) == pytest.approx(0.1)
