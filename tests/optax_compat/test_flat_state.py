"""``optax_compat.distributed``: states as flat dicts keyed by name, for DCP (one process)."""

from __future__ import annotations

import pytest
import torch

import optax_compat as optax
from optax_compat.distributed import state_from_flat_dict, state_to_flat_dict


def _params() -> dict:
    return {"layer.weight": torch.ones(2, 3), "layer.bias": torch.zeros(2)}


def test_leaves_are_named_by_field_key_and_index_and_shared():
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2))
    state = tx.init(_params())
    flat = state_to_flat_dict(state)
    assert sorted(flat) == ["1.0.count", "1.0.mu.layer.bias", "1.0.mu.layer.weight",
                            "1.0.nu.layer.bias", "1.0.nu.layer.weight"]
    assert flat["1.0.mu.layer.weight"] is state[1][0].mu["layer.weight"]


def test_round_trip_into_a_fresh_state_restores_values_and_types():
    tx = optax.adam(1e-2)
    params = _params()
    _, state = tx.update({k: torch.full_like(v, 0.5) for k, v in params.items()},
                         tx.init(params))
    restored = state_from_flat_dict(tx.init(params), state_to_flat_dict(state))
    assert type(restored[0]).__name__ == "ScaleByAdamState"
    assert int(restored[0].count) == 1
    torch.testing.assert_close(restored[0].mu["layer.bias"], state[0].mu["layer.bias"])


def test_a_missing_entry_is_named():
    tx = optax.adam(1e-2)
    flat = state_to_flat_dict(tx.init(_params()))
    del flat["0.nu.layer.bias"]
    with pytest.raises(KeyError, match=r"0\.nu\.layer\.bias"):
        state_from_flat_dict(tx.init(_params()), flat)


def test_names_that_collide_once_joined_are_refused():
    state = {"a.b": torch.zeros(1), "a": {"b": torch.zeros(1)}}
    with pytest.raises(ValueError, match=r"'a\.b'"):
        state_to_flat_dict(state)
