"""snapshot, monitor and measure_with_ema (``transforms/_monitoring.py``) against real Optax."""

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import compare_with_optax
from tests.optax_compat.combinator_cases import jitted


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_snapshot_and_monitor_match_optax(dtype):
    def measures(lib):
        return {"norm": lib.tree.norm,
                "norm_ema": lib.measure_with_ema(lib.tree.norm, decay=0.8),
                "max_ema": lib.measure_with_ema(lib.tree.max, decay=0.5, debias=False)}

    ours_state, _ = compare_with_optax(
        ox.chain(ox.trace(0.9), ox.snapshot("before_clip", ox.tree.norm), ox.monitor(measures(ox)),
                 ox.clip_by_global_norm(1.0)),
        lambda: jitted(optax.chain(optax.trace(0.9), optax.snapshot("before_clip", optax.tree.norm),
                                   optax.monitor(measures(optax)),
                                   optax.clip_by_global_norm(1.0))),
        dtype, steps=4)
    monitor_state = ours_state[2]
    assert set(monitor_state.measurements) == {"norm", "norm_ema", "max_ema"}
    assert float(ours_state[1].measurement["before_clip"]) == pytest.approx(
        float(monitor_state.measurements["norm"]))
