"""FSDP2 (DTensor), DCP, DDP and ZeRO on 2 CPU processes (gloo, 127.0.0.1).

The ranks are spawned once for the whole module (``tests/distributed_worker.py`` runs every
case, each compared with a single-process run in the same process); each case is one test
here. The spawn is bounded in time and the processes are ended if they overrun.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist
from filelock import FileLock

from tests import distributed_worker

WORLD = 2
TIMEOUT_SECONDS = 150

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawn_and_collect(out_dir: str) -> dict[str, Any]:
    """Runs the ranks once, bounded in time, and gathers what each rank reported."""
    context = torch.multiprocessing.start_processes(
        distributed_worker.run, args=(WORLD, _free_port(), out_dir), nprocs=WORLD, join=False,
        start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_SECONDS
    failure = None
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                failure = f"the ranks did not finish within {TIMEOUT_SECONDS} s"
                break
    except Exception as error:  # a rank died: report the cases it did write, fail the rest
        failure = str(error)
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    per_rank = []
    for rank in range(WORLD):
        path = os.path.join(out_dir, f"rank{rank}.jsonl")
        lines = open(path).read().splitlines() if os.path.exists(path) else []
        per_rank.append({record["case"]: record for record in map(json.loads, lines)})
    return {"ranks": per_rank, "failure": failure, "out_dir": out_dir}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # Under pytest-xdist every worker would run this fixture: the first one spawns the ranks,
    # the others wait on the lock and read its results.
    session_root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:  # each worker's base is inside the session's
        session_root = session_root.parent
    shared = session_root / "torch_distributed"
    shared.mkdir(exist_ok=True)
    summary = shared / "results.json"
    with FileLock(str(shared / "lock")):
        if not summary.exists():
            summary.write_text(json.dumps(_spawn_and_collect(str(shared))))
    return json.loads(summary.read_text())


CASES = list(distributed_worker.cases("unused"))


@pytest.mark.parametrize("case", CASES)
def test_matches_single_process(results: dict[str, Any], case: str) -> None:
    for rank, records in enumerate(results["ranks"]):
        record = records.get(case)
        assert record is not None, f"rank {rank} did not report: {results['failure']}"
        assert "error" not in record, f"rank {rank}:\n{record['error']}"
        assert record["difference"] <= record["tolerance"], (
            f"rank {rank}: relative difference {record['difference']:.3g} from the "
            f"single-process run, tolerance {record['tolerance']:.1g}")


@pytest.mark.parametrize("name", list(distributed_worker.CHECKPOINTED))
def test_dcp_checkpoint_of_two_ranks_loads_on_one(results: dict[str, Any], name: str) -> None:
    checkpoint = distributed_worker.checkpoint_path(results["out_dir"], name)
    assert os.path.isdir(checkpoint), f"the 2-rank save did not happen: {results['failure']}"
    make_tx = distributed_worker.CHECKPOINTED[name]
    assert distributed_worker.load_on_one_process(checkpoint, make_tx) <= 1e-10
