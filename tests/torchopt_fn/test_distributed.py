"""torchopt_fn.distributed: world info, rank filters, partitioners, reducers, and a real 2-worker
RPC run whose distributed gradients must equal the single-process ones."""

from __future__ import annotations

import inspect
import os
import pickle
import queue
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.functional import mse_loss

import torchopt_fn as torchopt
from torchopt_fn.distributed import world

distributed = torchopt.distributed
WORLD_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@pytest.fixture
def set_world(monkeypatch):
    """Sets the torchrun variables and clears the cached world info (restored afterwards)."""
    cached = dict(vars(world.get_world_info))

    def set_world_(rank=None, size=None, local_rank=None, local_size=None):
        for name, value in zip(WORLD_VARIABLES, (rank, size, local_rank, local_size)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))
        world.get_world_info.world_info = None
        return distributed.get_world_info()

    yield set_world_
    vars(world.get_world_info).clear()
    vars(world.get_world_info).update(cached)


# ---------------------------------------------------------------------------------------------
# Public names and signatures (TorchOpt 0.7.3)
# ---------------------------------------------------------------------------------------------

def test_public_names_follow_torchopt():
    assert sorted(distributed.__all__) == sorted([
        "is_available", "TensorDimensionPartitioner", "dim_partitioner", "batch_partitioner",
        "mean_reducer", "sum_reducer", "remote_async_call", "remote_sync_call", "parallelize",
        "parallelize_async", "parallelize_sync", "get_world_info", "get_world_rank", "get_rank",
        "get_world_size", "get_local_rank", "get_local_world_size", "get_worker_id", "barrier",
        "auto_init_rpc", "on_rank", "not_on_rank", "rank_zero_only", "rank_non_zero_only"])
    assert all(hasattr(distributed, name) for name in distributed.__all__)
    assert sorted(distributed.autograd.__all__) == sorted(
        ["is_available", "context", "DistAutogradContext", "get_gradients", "backward", "grad"])
    assert distributed.autograd.context is torch.distributed.autograd.context
    assert distributed.rpc is rpc  # TorchOpt's examples use ``todist.rpc.RRef``
    assert distributed.parallelize_sync is distributed.parallelize
    assert distributed.get_rank is distributed.get_world_rank
    assert distributed.is_available() is True
    assert "distributed" not in torchopt.__all__  # as in TorchOpt: a submodule, not a name


def _parameters(function):
    """``name=default`` per parameter, ``*`` before keyword-only ones, ``*name`` for varargs."""
    described, keyword_only = [], False
    for p in inspect.signature(function).parameters.values():
        if p.kind is p.KEYWORD_ONLY and not keyword_only:
            described.append("*")
            keyword_only = True
        if p.kind is p.VAR_POSITIONAL:
            described.append(f"*{p.name}")
        else:
            described.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return " ".join(described)


UNSET = repr(rpc.api.UNSET_RPC_TIMEOUT)
REMOTE_CALL = f"func * args=None kwargs=None partitioner=None reducer=None timeout={UNSET}"


@pytest.mark.parametrize(("function", "expected"), [
    (distributed.get_world_info, ""),
    (distributed.get_worker_id, "id=None"),
    (distributed.barrier, "worker_names=None"),
    (distributed.auto_init_rpc,
     "worker_init_fn=None worker_name_format="
     f"{world.default_worker_name_format!r} * backend=None rpc_backend_options=None"),
    (distributed.on_rank, "*ranks"),
    (distributed.not_on_rank, "*ranks"),
    (distributed.rank_zero_only, "func"),
    (distributed.rank_non_zero_only, "func"),
    (distributed.TensorDimensionPartitioner,
     "dim * exclusive=False keepdim=False workers=None"),
    (distributed.dim_partitioner, "dim=0 * exclusive=False keepdim=True workers=None"),
    (distributed.remote_async_call, REMOTE_CALL),
    (distributed.remote_sync_call, REMOTE_CALL),
    (distributed.parallelize, f"partitioner=None reducer=None timeout={UNSET}"),
    (distributed.parallelize_async, f"partitioner=None reducer=None timeout={UNSET}"),
    (distributed.autograd.backward, "autograd_ctx_id tensors retain_graph=False inputs=None"),
    (distributed.autograd.grad,
     "autograd_ctx_id outputs inputs retain_graph=False allow_unused=False"),
], ids=lambda value: value.__name__ if callable(value) else "signature")
def test_signatures_follow_torchopt(function, expected):
    assert _parameters(function) == expected


def test_imports_and_degrades_without_distributed_support():
    # A PyTorch build without distributed support has only ``is_available`` in these modules.
    script = """
import torch.distributed as dist, torch.distributed.rpc as rpc, torch.distributed.autograd as da
for module in (dist, rpc, da):
    module.is_available = lambda: False
for name in ("api", "BackendType", "RpcBackendOptions", "init_rpc", "rpc_async", "RRef"):
    delattr(rpc, name)
for name in ("DistAutogradContext", "get_gradients", "backward"):
    delattr(da, name)
import torch, torchopt_fn
d = torchopt_fn.distributed
assert d.is_available() is False and d.api.UNSET_RPC_TIMEOUT == -1.0
assert d.autograd.__all__ == ["is_available", "context"] and not hasattr(d.autograd, "grad")
parts = d.batch_partitioner(torch.arange(3.0), 'x')
assert [(rank, args[0].tolist(), args[1]) for rank, args, _ in parts] == [(0, [0.0, 1.0, 2.0], 'x')]
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k not in WORLD_VARIABLES}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ---------------------------------------------------------------------------------------------
# World info and rank filters
# ---------------------------------------------------------------------------------------------

def test_world_defaults_to_a_single_worker(set_world):
    info = set_world()
    assert info == world.WorldInfo(world_rank=0, world_size=1, local_rank=0, local_world_size=1)
    assert info.rank == 0 and info.worker_name == "worker0"


def test_world_info_is_read_from_torchrun_variables_and_cached(set_world, monkeypatch):
    info = set_world(rank=11, size=12, local_rank=3, local_size=4)
    assert tuple(info) == (11, 12, 3, 4)
    assert (distributed.get_world_rank(), distributed.get_rank(), distributed.get_world_size(),
            distributed.get_local_rank(), distributed.get_local_world_size()) == (11, 11, 12, 3, 4)
    assert info.rank == 11 and info.worker_name == "worker11"
    getter = distributed.get_world_info
    assert (getter.world_info, getter.WORLD_INFO) == (info, info)
    assert (getter.rank, getter.RANK, getter.world_rank, getter.WORLD_SIZE, getter.local_rank,
            getter.LOCAL_WORLD_SIZE) == (11, 11, 11, 12, 3, 4)

    monkeypatch.setenv("RANK", "5")
    assert distributed.get_world_rank() == 11  # read once, like TorchOpt


def test_worker_names_are_zero_padded_to_the_world_size(set_world):
    assert world.default_worker_name_format(7, 100, 0, 1) == "worker007"
    assert world.default_worker_name_format(world_rank=3, world_size=9, local_rank=0,
                                            local_world_size=1) == "worker3"
    assert set_world(rank=3, size=12).worker_name == "worker03"


def test_auto_init_rpc_sets_the_worker_name_format_without_starting_rpc(set_world, monkeypatch):
    monkeypatch.setattr(world, "_WORKER_NAME_FORMAT", world._WORKER_NAME_FORMAT)
    set_world(rank=2, size=4, local_rank=0, local_size=2)

    def trainer_name(world_rank, world_size, local_rank, local_world_size):
        return f"trainer{world_rank}of{world_size}-local{local_rank}of{local_world_size}"

    def main():
        return "ran"

    decorated = distributed.auto_init_rpc(worker_name_format=trainer_name)(main)
    assert distributed.get_world_info().worker_name == "trainer2of4-local0of2"
    assert decorated.__name__ == "main" and decorated is not main
    assert not rpc.api._is_current_rpc_agent_set()


def test_get_worker_id_passes_ranks_through():
    assert distributed.get_worker_id(3) == 3


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_rank_filters_run_the_function_only_on_the_chosen_ranks(set_world, rank):
    set_world(rank=rank, size=3)
    calls = []

    def work(x, *, scale=1):
        """Doc."""
        calls.append(x)
        return x * scale

    expected = {
        distributed.on_rank(1, 2): rank in (1, 2),
        distributed.on_rank(rank): True,
        distributed.not_on_rank(1, 2): rank not in (1, 2),
        distributed.not_on_rank(rank): False,
        distributed.rank_zero_only: rank == 0,
        distributed.rank_non_zero_only: rank != 0,
        world.rank_all: True,
    }
    for decorator, runs in expected.items():
        calls.clear()
        filtered = decorator(work)
        assert filtered(3, scale=2) == (6 if runs else None)
        assert calls == ([3] if runs else [])
        assert filtered.__name__ == "work" and filtered.__doc__ == "Doc."
    assert world.rank_all(work) is work


def test_rank_filters_read_the_rank_when_applied(set_world):
    set_world(rank=0, size=2)
    on_zero = distributed.rank_zero_only(lambda: "ran")
    set_world(rank=1, size=2)
    assert on_zero() == "ran"
    assert distributed.rank_zero_only(lambda: "ran")() is None


# ---------------------------------------------------------------------------------------------
# Partitioners and reducers (no RPC needed: they only read the world size)
# ---------------------------------------------------------------------------------------------

def _rows(calls, position=0):
    return [(rank, args[position].tolist()) for rank, args, _ in calls]


def test_batch_partitioner_splits_tensors_and_broadcasts_the_rest(set_world):
    set_world(rank=1, size=2)
    model = torch.nn.Linear(1, 1)
    inputs = torch.arange(10.0).reshape(5, 2).clone()
    calls = distributed.batch_partitioner(model, inputs, None, targets=torch.arange(5), k=3)
    # 5 rows on 2 workers: 5 // 2 rows, the remainder in the last part.
    assert _rows(calls, 1) == [(0, [[0.0, 1.0], [2.0, 3.0]]),
                               (1, [[4.0, 5.0], [6.0, 7.0], [8.0, 9.0]])]
    assert [kwargs["targets"].tolist() for _, _, kwargs in calls] == [[0, 1], [2, 3, 4]]
    for _, args, kwargs in calls:
        assert args[0] is model and args[2] is None and kwargs["k"] == 3
        assert args[1]._base is inputs  # views, not copies


@pytest.mark.parametrize(("batch", "size", "lengths"), [
    (7, 3, [2, 2, 3]), (6, 3, [2, 2, 2]), (2, 3, [1, 1]), (3, 3, [1, 1, 1]), (4, 1, [4])])
def test_batch_partitioner_part_sizes(set_world, batch, size, lengths):
    set_world(size=size)
    calls = distributed.batch_partitioner(torch.arange(batch))
    assert [len(args[0]) for _, args, _ in calls] == lengths
    assert [rank for rank, _, _ in calls] == list(range(len(lengths)))
    assert torch.cat([args[0] for _, args, _ in calls]).tolist() == list(range(batch))


def test_exclusive_partitioners_give_one_part_per_sample_round_robin(set_world):
    set_world(size=2)
    x = torch.arange(10.0).reshape(5, 2)
    kept = distributed.dim_partitioner(exclusive=True)(x)
    assert _rows(kept) == [(0, [[0.0, 1.0]]), (1, [[2.0, 3.0]]), (0, [[4.0, 5.0]]),
                           (1, [[6.0, 7.0]]), (0, [[8.0, 9.0]])]
    assert _rows(distributed.api.exclusive_batch_partitioner(x)) == _rows(kept)
    selected = distributed.dim_partitioner(exclusive=True, keepdim=False)(x)
    assert _rows(selected) == [(0, [0.0, 1.0]), (1, [2.0, 3.0]), (0, [4.0, 5.0]),
                               (1, [6.0, 7.0]), (0, [8.0, 9.0])]


def test_dim_partitioner_on_inner_and_negative_dims(set_world):
    set_world(size=2)
    x = torch.randn(2, 5, 3)
    y = torch.randn(5, 3)
    calls = distributed.dim_partitioner(dim=-2)(x, y)
    assert [a[0].shape for _, a, _ in calls] == [(2, 2, 3), (2, 3, 3)]
    assert torch.equal(torch.cat([a[0] for _, a, _ in calls], dim=-2), x)
    assert torch.equal(torch.cat([a[1] for _, a, _ in calls], dim=-2), y)
    columns = distributed.dim_partitioner(dim=1, exclusive=True, keepdim=False)(x)
    assert [a[0].shape for _, a, _ in columns] == [(2, 3)] * 5
    assert torch.equal(torch.stack([a[0] for _, a, _ in columns], dim=1), x)


def test_dim_partitioner_uses_the_given_workers(set_world):
    set_world(size=4)
    calls = distributed.dim_partitioner(workers=[3, 1])(torch.arange(5))
    assert _rows(calls) == [(3, [0, 1]), (1, [2, 3, 4])]


def test_partitioner_without_tensors_calls_the_current_worker_once(set_world):
    set_world(rank=1, size=2)
    kwargs = {"n": 2}
    (call,) = distributed.batch_partitioner("a", 1, **kwargs)
    assert call == (1, ("a", 1), {"n": 2}) and call[2] is not kwargs


def test_partitioner_errors(set_world):
    set_world(size=2)
    with pytest.raises(ValueError, match=r"Batch size mismatch on dim=0\. Expected 4, got 3"):
        distributed.batch_partitioner(torch.zeros(4), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="keepdim=False should be used with exclusive=True"):
        distributed.TensorDimensionPartitioner(0)
    with pytest.raises(ValueError, match="keepdim=False should be used with exclusive=True"):
        distributed.dim_partitioner(keepdim=False)
    with pytest.raises(ValueError, match=r"Invalid partitioner: 1\.5\."):
        distributed.remote_async_call(len, args=([],), partitioner=1.5)


def test_partitioner_pickles(set_world):
    set_world(size=3)
    partitioner = distributed.dim_partitioner(dim=1, exclusive=True, keepdim=False, workers=[2])
    restored = pickle.loads(pickle.dumps(partitioner))
    assert vars(restored) == vars(partitioner)
    x = torch.arange(6).reshape(2, 3)
    assert _rows(restored(x)) == _rows(partitioner(x))


@settings(max_examples=30)
@given(batch=st.integers(1, 12), size=st.integers(1, 4), exclusive=st.booleans(),
       keepdim=st.booleans(), dim=st.sampled_from([0, 1, -1]))
def test_partitions_cover_the_batch_in_order(batch, size, exclusive, keepdim, dim):
    keepdim = keepdim or not exclusive
    original = dict(vars(world.get_world_info))
    world.get_world_info.world_info = world.WorldInfo(0, size, 0, size)
    try:
        x = torch.arange(2 * batch * 3).reshape(2, batch, 3).movedim(1, dim)
        calls = distributed.dim_partitioner(dim, exclusive=exclusive, keepdim=keepdim)(x)
    finally:
        vars(world.get_world_info).clear()
        vars(world.get_world_info).update(original)
    parts = [args[0] for _, args, _ in calls]
    assert len(parts) == (batch if exclusive else min(batch, size))
    assert [rank for rank, _, _ in calls] == [i % size for i in range(len(parts))]
    joined = torch.cat(parts, dim=dim) if keepdim else torch.stack(parts, dim=dim)
    assert torch.equal(joined, x)


def test_reducers():
    results = [torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([3.0, 6.0]).double()]
    assert distributed.mean_reducer(results).tolist() == [2.0, 4.0]
    assert distributed.sum_reducer(iter(results)).tolist() == [4.0, 8.0]
    scalars = (torch.tensor(x) for x in (1.0, 2.0, 6.0))
    assert distributed.mean_reducer(scalars).item() == 3.0


def test_parallelize_keeps_the_original_function_importable():
    module = sys.modules[__name__]
    original = module.parallel_mean_loss__parallelize_unwrapped__
    assert parallel_mean_loss.__wrapped__ is original
    assert parallel_mean_loss.__name__ == "parallel_mean_loss"
    assert original.__qualname__ == "parallel_mean_loss__parallelize_unwrapped__"
    assert pickle.loads(pickle.dumps(original)) is original
    unwrapped_async = module.parallel_mean_loss_async__parallelize_async_unwrapped__
    assert parallel_mean_loss_async.__wrapped__ is unwrapped_async


def test_autograd_rejects_bad_inputs_before_any_communication():
    leaf = torch.ones(2, requires_grad=True)
    constant = torch.ones(2)
    with pytest.raises(RuntimeError, match="'inputs' argument to backward\\(\\) cannot be empty"):
        distributed.autograd.backward(0, leaf.sum(), inputs=[])
    with pytest.raises(RuntimeError, match="does not require grad"):
        distributed.autograd.backward(0, leaf.sum(), inputs=[leaf, constant])
    with pytest.raises(RuntimeError, match="does not require grad"):
        distributed.autograd.grad(0, leaf.sum(), constant)


# ---------------------------------------------------------------------------------------------
# Two real RPC workers (spawned processes)
# ---------------------------------------------------------------------------------------------

def _local_loss(params_rref, inputs, targets, reduction):
    weight, bias = params_rref.to_here()
    return mse_loss(inputs @ weight + bias, targets, reduction=reduction)


@distributed.parallelize(partitioner=distributed.batch_partitioner,
                         reducer=distributed.mean_reducer)
def parallel_mean_loss(params_rref, inputs, targets):
    return _local_loss(params_rref, inputs, targets, "mean")


@distributed.parallelize_async(partitioner=distributed.batch_partitioner,
                               reducer=distributed.mean_reducer)
def parallel_mean_loss_async(params_rref, inputs, targets):
    return _local_loss(params_rref, inputs, targets, "mean")


@distributed.parallelize()  # defaults: batch partitioner and mean reducer
def parallel_default_loss(params_rref, inputs, targets):
    return _local_loss(params_rref, inputs, targets, "mean")


def _worker_and_rows(rows):
    return distributed.get_world_info().worker_name, rows.tolist()


def _as_lists(tensors):
    return [None if t is None else t.tolist() for t in tensors]


@distributed.rank_zero_only
def _drive_workers(weight, bias, inputs, targets):
    """Runs on rank 0 only: every remote call and distributed backward pass of the test."""
    report = {
        "by_rank": distributed.remote_sync_call(distributed.get_world_rank, partitioner=1),
        "by_name": distributed.remote_sync_call(_worker_and_rows, args=(inputs[:1],),
                                                partitioner="worker1"),
        "split": distributed.remote_sync_call(_worker_and_rows, args=(inputs,)),
        "to_worker1": distributed.remote_sync_call(
            _worker_and_rows, args=(inputs,),
            partitioner=distributed.dim_partitioner(workers=["worker1"])),
        "no_tensor": distributed.remote_sync_call(distributed.get_world_rank),
        "worker_id": distributed.get_worker_id("worker1"),
    }
    weight = weight.clone().requires_grad_()
    bias = bias.clone().requires_grad_()
    unused = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    params_rref = rpc.RRef([weight, bias])  # (an RRef of a tuple fails to unpickle on torch 2.13)
    autograd = distributed.autograd

    with autograd.context() as context_id:
        loss = parallel_mean_loss(params_rref, inputs, targets)
        autograd.backward(context_id, loss, inputs=[weight])
        report["mean_loss"] = loss.item()
        report["backward_weight_only"] = _as_lists([weight.grad, bias.grad])

    with autograd.context() as context_id:
        loss = parallel_mean_loss(params_rref, inputs, targets)
        autograd.backward(context_id, [loss])
        context_gradients = autograd.get_gradients(context_id)
        report["backward_accumulated"] = _as_lists([weight.grad, bias.grad])
        report["get_gradients"] = _as_lists([context_gradients[weight], context_gradients[bias]])

    with autograd.context() as context_id:
        loss = distributed.remote_sync_call(
            _local_loss, args=(params_rref, inputs, targets, "sum"),
            reducer=distributed.sum_reducer)
        report["sum_loss"] = loss.item()
        report["grad_sum"] = _as_lists(autograd.grad(context_id, loss, (weight, bias, unused),
                                                     retain_graph=True, allow_unused=True))
        try:
            autograd.grad(context_id, loss, (weight, unused))
        except RuntimeError as error:
            report["unused_error"] = str(error)

    with autograd.context() as context_id:
        future = parallel_mean_loss_async(params_rref, inputs, targets)
        report["async_is_future"] = isinstance(future, torch._C.Future)
        report["grad_async"] = _as_lists(autograd.grad(context_id, future.wait(), [weight, bias]))

    with autograd.context() as context_id:
        loss = parallel_default_loss(params_rref, inputs, targets)
        report["default_loss"] = loss.item()
        report["grad_default"] = _as_lists(autograd.grad(context_id, loss, [weight, bias]))
    return report


def _use_float64():
    torch.set_default_dtype(torch.float64)


@distributed.auto_init_rpc(_use_float64,
                           rpc_backend_options=rpc.TensorPipeRpcBackendOptions(rpc_timeout=45))
def _worker_main(results, weight, bias, inputs, targets):
    results.put(("world", tuple(distributed.get_world_info()),
                 distributed.get_world_info().worker_name, str(torch.get_default_dtype())))
    report = _drive_workers(weight, bias, inputs, targets)
    if report is not None:
        results.put(("report", report))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _single_process_gradients(weight, bias, inputs, targets, loss_of_rows):
    weight = weight.clone().requires_grad_()
    bias = bias.clone().requires_grad_()
    loss = loss_of_rows(lambda rows, reduction: mse_loss(
        inputs[rows] @ weight + bias, targets[rows], reduction=reduction))
    return loss.item(), [g.tolist() for g in torch.autograd.grad(loss, (weight, bias))]


def _assert_close(actual, expected):
    torch.testing.assert_close(torch.tensor(actual, dtype=torch.float64),
                               torch.tensor(expected, dtype=torch.float64), rtol=1e-10, atol=0)


def test_two_rpc_workers_give_single_process_gradients(monkeypatch):
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(3, generator=generator, dtype=torch.float64)
    bias = torch.randn((), generator=generator, dtype=torch.float64)
    inputs = torch.randn(5, 3, generator=generator, dtype=torch.float64)
    targets = torch.randn(5, generator=generator, dtype=torch.float64)

    context = mp.get_context("spawn")
    results = context.Queue()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    workers = []
    for rank in range(2):
        # The world is read from the environment when the worker imports the library.
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        worker = context.Process(target=_worker_main,
                                 args=(results, weight, bias, inputs, targets), daemon=True)
        worker.start()
        workers.append(worker)

    # ~10 s on an idle machine; the deadline turns a hang into a failure, with room for load.
    received, deadline = [], time.monotonic() + 60
    try:
        while len(received) < 3 and time.monotonic() < deadline:
            try:
                received.append(results.get(timeout=max(deadline - time.monotonic(), 0.1)))
            except queue.Empty:
                break
        for worker in workers:
            worker.join(timeout=max(deadline - time.monotonic(), 1))
        exit_codes = [worker.exitcode for worker in workers]
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join(5)
    assert exit_codes == [0, 0], f"workers hung or failed: {exit_codes}, got {received}"

    worlds = sorted(item[1:] for item in received if item[0] == "world")
    assert worlds == [((0, 2, 0, 2), "worker0", "torch.float64"),
                      ((1, 2, 1, 2), "worker1", "torch.float64")]
    (report,) = [item[1] for item in received if item[0] == "report"]

    assert report["by_rank"] == [1]
    assert report["by_name"] == [("worker1", [inputs[0].tolist()])]
    assert report["split"] == [("worker0", inputs[:2].tolist()), ("worker1", inputs[2:].tolist())]
    assert report["to_worker1"] == [("worker1", inputs.tolist())]
    assert report["no_tensor"] == [0]
    assert report["worker_id"] == 1

    # batch 5 on 2 workers: rows 0:2 and 2:5; the mean reducer averages the two part losses.
    mean_loss, mean_grads = _single_process_gradients(
        weight, bias, inputs, targets,
        lambda loss: (loss(slice(0, 2), "mean") + loss(slice(2, 5), "mean")) / 2)
    _assert_close(report["mean_loss"], mean_loss)
    _assert_close(report["backward_weight_only"][0], mean_grads[0])
    assert report["backward_weight_only"][1] is None
    _assert_close(report["backward_accumulated"][0], [2 * g for g in mean_grads[0]])
    _assert_close(report["backward_accumulated"][1], mean_grads[1])
    for key in ("get_gradients", "grad_async", "grad_default"):
        for actual, expected in zip(report[key], mean_grads):
            _assert_close(actual, expected)
    _assert_close(report["default_loss"], mean_loss)
    assert report["async_is_future"] is True

    # Summed part losses are the full-batch summed loss.
    sum_loss, sum_grads = _single_process_gradients(
        weight, bias, inputs, targets, lambda loss: loss(slice(None), "sum"))
    _assert_close(report["sum_loss"], sum_loss)
    _assert_close(report["grad_sum"][0], sum_grads[0])
    _assert_close(report["grad_sum"][1], sum_grads[1])
    assert report["grad_sum"][2] is None
    assert "appears to not have been used in the graph" in report["unused_error"]
