"""The body of the distributed tests: one process of a 2-rank gloo group on 127.0.0.1.

Each case trains a small model on 2 ranks (FSDP2 ``fully_shard``, DTensor parameters, DDP or
ZeRO) and, in the same process, the same model on one process with the whole batch; it reports
the largest relative difference of the parameters and state leaves between the two runs, as
one JSON line per case in ``rank<r>.jsonl``. ``tests/test_torch_distributed.py`` spawns the
ranks once and turns each line into a test.

Each rank gets its half of the batch; FSDP2 and DDP average the gradients over the ranks, which
equals the gradient of the whole batch's mean loss, so both runs see the same gradients.
"""

from __future__ import annotations

import datetime
import json
import os
import traceback
from collections.abc import Callable
from typing import Any

import optree
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

import optax_compat as optax
import torchopt_fn
from optax_compat import memory
from optax_compat._runtime import quantization
from optax_compat._runtime import tree_math as tm
from optax_compat.distributed import state_from_flat_dict, state_to_flat_dict

STEPS = 3
BATCH = 8
# float32: torch.optim.Adam itself differs by ~1e-7 between the two runs (its case checks
# that it stays within this tolerance too).
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-6}


def _model(dtype: torch.dtype) -> nn.Module:
    # Output size 5: dimension 0 of the second layer is sharded unevenly over 2 ranks.
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 5)).to(dtype)


def _batch(dtype: torch.dtype, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + step)
    return (torch.randn(BATCH, 6, generator=generator, dtype=dtype),
            torch.randn(BATCH, 5, generator=generator, dtype=dtype))


def _loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], rank: int | None,
          world: int) -> torch.Tensor:
    x, y = batch
    if rank is not None:
        rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        x, y = x[rows], y[rows]
    return (model(x) - y).pow(2).mean()


def _full(x: Any) -> Any:
    return x.full_tensor() if isinstance(x, DTensor) else x


def _difference(ours: Any, reference: Any) -> float:
    """The largest ``|a - b| / max|b|`` over the leaves of two trees (DTensors gathered)."""
    worst = 0.0
    ours_leaves, reference_leaves = tm.leaves(ours), tm.leaves(reference)
    if len(ours_leaves) != len(reference_leaves):
        raise AssertionError(f"{len(ours_leaves)} leaves vs {len(reference_leaves)}")
    for a, b in zip(ours_leaves, reference_leaves):
        if not isinstance(b, torch.Tensor):
            worst = max(worst, float(abs(float(a) - float(b))))
            continue
        a, b = _full(a).detach().double(), b.detach().double()
        scale = max(b.abs().max().item(), 1e-30) if b.numel() else 1.0
        worst = max(worst, (a - b).abs().max().item() / scale if b.numel() else 0.0)
    return worst


# ----------------------------------------------------------------------------------------------
# Training loops shared by the sharded and the single-process runs.


def _train_functional(model: nn.Module, tx: Any, rank: int | None, world: int,
                      steps: int = STEPS, inplace: bool = False, state: Any = None,
                      first_step: int = 0, poison_step: int | None = None) -> tuple[dict, Any]:
    """Trains with ``tx``; at ``poison_step`` one gradient element (held by the last rank
    when sharded) is NaN."""
    params = dict(model.named_parameters())
    if state is None:
        state = tx.init({name: p.detach() for name, p in params.items()})
    dtype = next(iter(params.values())).dtype
    for step in range(first_step, first_step + steps):
        model.zero_grad()
        _loss(model, _batch(dtype, step), rank, world).backward()
        grads = {name: p.grad for name, p in params.items()}
        if step == poison_step:
            grads["2.weight"] = grads["2.weight"] + _nan_at_last_row(grads["2.weight"])
        detached = {name: p.detach() for name, p in params.items()}
        extra = {"inplace": True} if inplace else {}
        updates, state = tx.update(grads, state, detached, **extra)
        with torch.no_grad():
            torch._foreach_add_(tm.leaves(params), tm.leaves(updates))
    return {name: p.detach() for name, p in params.items()}, state


def _nan_at_last_row(like: torch.Tensor) -> torch.Tensor:
    mask = torch.zeros(like.shape, dtype=like.dtype)
    mask[-1, 0] = float("nan")
    if isinstance(like, DTensor):
        return distribute_tensor(mask, like.device_mesh, like.placements, src_data_rank=None)
    return mask


def _train_module_optimizer(model: nn.Module, make: Callable[[Any], Any], rank: int | None,
                            world: int, steps: int = STEPS) -> dict:
    optimizer = make(model.parameters())
    dtype = next(model.parameters()).dtype
    for step in range(steps):
        optimizer.zero_grad()
        _loss(model, _batch(dtype, step), rank, world).backward()
        optimizer.step()
    return {name: p.detach() for name, p in model.named_parameters()}


def _sharded(dtype: torch.dtype, **kwargs: Any) -> nn.Module:
    model = _model(dtype)
    fully_shard(model, **kwargs)
    return model


# ----------------------------------------------------------------------------------------------
# Cases. Each returns ``(difference, tolerance)``.


def _functional_case(make_tx: Callable[[], Any], dtype: torch.dtype = torch.float64,
                     inplace: bool = False) -> Callable[[int, int], tuple[float, float]]:
    def case(rank: int, world: int) -> tuple[float, float]:
        ours, ours_state = _train_functional(_sharded(dtype), make_tx(), rank, world,
                                             inplace=inplace)
        reference, reference_state = _train_functional(_model(dtype), make_tx(), None, world,
                                                       inplace=inplace)
        return max(_difference(ours, reference),
                   _difference(ours_state, reference_state)), TOLERANCE[dtype]
    return case


def _optimizer_case(make: Callable[[Any], Any],
                    dtype: torch.dtype = torch.float64) -> Callable[[int, int], tuple]:
    def case(rank: int, world: int) -> tuple[float, float]:
        ours = _train_module_optimizer(_sharded(dtype), make, rank, world)
        reference = _train_module_optimizer(_model(dtype), make, None, world)
        return _difference(ours, reference), TOLERANCE[dtype]
    return case


def _widened(state: Any, bits: int) -> Any:
    """``state`` with each quantized (``bits``) or cast leaf read back in its own dtype (a
    DTensor, placed as the parameter is, for a sharded one)."""
    def read(node: Any) -> Any:
        if isinstance(node, quantization.Quantized):
            return quantization.dequantize(node, bits, block_size=10)
        return node.values.to(node.original.dtype) if isinstance(node, memory.Cast) else node
    return optree.tree_map(read, state, none_is_leaf=True, is_leaf=lambda node: isinstance(
        node, (quantization.Quantized, memory.Cast)))


def _memory_case(make_tx: Callable[[], Any], tolerance: float, bits: int = 8
                 ) -> Callable[[int, int], tuple[float, float]]:
    """Trains float32 FSDP2 shards and one process alike; compares the parameters and the
    states read back, each rank's quantized or cast shard gathered."""
    def case(rank: int, world: int) -> tuple[float, float]:
        ours, ours_state = _train_functional(_sharded(torch.float32), make_tx(), rank, world)
        reference, reference_state = _train_functional(_model(torch.float32), make_tx(), None,
                                                       world)
        return max(_difference(ours, reference),
                   _difference(_widened(ours_state, bits), _widened(reference_state, bits))
                   ), tolerance
    return case


def _apply_if_finite_nan_on_one_rank_case(rank: int, world: int) -> tuple[float, float]:
    """A NaN in the shard of one rank only: every rank must skip the step (the finiteness
    check is global) and the count of bad steps must match one process."""
    def make_tx() -> Any:
        return optax.apply_if_finite(optax.adam(1e-2), 3)

    ours, ours_state = _train_functional(_sharded(torch.float64), make_tx(), rank, world,
                                         poison_step=1)
    reference, reference_state = _train_functional(_model(torch.float64), make_tx(), None,
                                                   world, poison_step=1)
    if int(reference_state.total_notfinite) != 1:
        return 1.0, 0.0
    return max(_difference(ours, reference),
               _difference(ours_state, reference_state)), TOLERANCE[torch.float64]


def _lbfgs_case(rank: int, world: int) -> tuple[float, float]:
    """L-BFGS with its zoom line search on DTensor leaves (no module: the objective is
    written in DTensor operators, the line search evaluates it at trial points)."""
    mesh = init_device_mesh("cpu", (world,))
    generator = torch.Generator().manual_seed(3)
    start = {"a": torch.randn(5, 3, generator=generator, dtype=torch.float64),
             "b": torch.randn(7, generator=generator, dtype=torch.float64)}
    targets = {name: torch.randn(x.shape, generator=generator, dtype=torch.float64)
               for name, x in start.items()}

    def objective(params: dict, targets: dict) -> torch.Tensor:
        return sum(((p - t) ** 2 + 0.1 * p ** 4).sum()
                   for p, t in zip(params.values(), targets.values()))

    def run(params: dict, targets: dict) -> tuple[dict, Any]:
        tx = optax.lbfgs()
        state = tx.init(params)
        for _ in range(4):
            value, grads = optax.value_and_grad_from_state(objective)(params, targets,
                                                                     state=state)
            updates, state = tx.update(grads, state, params, value=value, grad=grads,
                                       value_fn=lambda p: objective(p, targets))
            params = optax.apply_updates(params, updates)
        return params, state

    sharded = {name: distribute_tensor(x, mesh, [Shard(0)]) for name, x in start.items()}
    sharded_targets = {name: distribute_tensor(x, mesh, [Shard(0)])
                       for name, x in targets.items()}
    ours, _ = run(sharded, sharded_targets)
    reference, _ = run(start, targets)
    return _difference(ours, reference), TOLERANCE[torch.float64]


def _projections_case(rank: int, world: int) -> tuple[float, float]:
    """Projections on DTensor leaves: the simplex (sorts the whole vector: gathered, then each
    rank keeps its shard), the L2 ball (a global norm), a box (scalar bounds) and a
    hyperplane (inner products)."""
    mesh = init_device_mesh("cpu", (world,))
    generator = torch.Generator().manual_seed(4)
    tree = {"a": torch.randn(5, 3, generator=generator, dtype=torch.float64),
            "b": torch.randn(7, generator=generator, dtype=torch.float64)}
    normal = {name: torch.randn(x.shape, generator=generator, dtype=torch.float64)
              for name, x in tree.items()}

    def project(tree: dict, normal: dict) -> list:
        return [optax.projections.projection_simplex(tree),
                optax.projections.projection_l2_ball(tree, 0.5),
                optax.projections.projection_box(tree, -0.3, 0.2),
                optax.projections.projection_hyperplane(tree, normal, 0.7)]

    def sharded(tree: dict) -> dict:
        return {name: distribute_tensor(x, mesh, [Shard(0)]) for name, x in tree.items()}

    ours = project(sharded(tree), sharded(normal))
    if not all(isinstance(x, DTensor) for x in tm.leaves(ours)):
        return 1.0, 0.0
    return _difference(ours, project(tree, normal)), TOLERANCE[torch.float64]


def _torch_adam_float32_case(rank: int, world: int) -> tuple[float, float]:
    """``torch.optim.Adam`` itself: shows the float32 tolerance is the one it reaches."""
    return _optimizer_case(lambda ps: torch.optim.Adam(ps, lr=1e-2), torch.float32)(rank, world)


# Optimizers whose states go through DCP: a chain with a global reduction, and factored moments
# (whose column statistics are reductions over the sharded axis).
CHECKPOINTED = {
    "clip_by_global_norm + adamw": lambda: optax.chain(optax.clip_by_global_norm(0.5),
                                                       optax.adamw(1e-2, weight_decay=0.1)),
    "adafactor": lambda: optax.adafactor(1e-2, min_dim_size_to_factor=4),
}


def _dcp_case(checkpoint: str, make_tx: Callable[[], Any]) -> Callable[[int, int], tuple]:
    """Save on 2 ranks after 2 steps; load into a layout sharded along dimension 1 instead
    (resharded by DCP) and train 2 more steps; compare with 4 uninterrupted steps."""
    def case(rank: int, world: int) -> tuple[float, float]:
        model = _sharded(torch.float64)
        _, state = _train_functional(model, make_tx(), rank, world, steps=2)
        dcp.save({"model": model.state_dict(), "opt": state_to_flat_dict(state)},
                 checkpoint_id=checkpoint)
        resharded = _sharded(torch.float64, shard_placement_fn=lambda p: Shard(p.ndim - 1))
        template = make_tx().init({name: p.detach() for name, p in resharded.named_parameters()})
        to_load = {"model": resharded.state_dict(), "opt": state_to_flat_dict(template)}
        dcp.load(to_load, checkpoint_id=checkpoint)
        resharded.load_state_dict(to_load["model"])
        ours, _ = _train_functional(resharded, make_tx(), rank, world, steps=2,
                                    state=state_from_flat_dict(template, to_load["opt"]),
                                    first_step=2)
        reference, _ = _train_functional(_model(torch.float64), make_tx(), None, world, steps=4)
        return _difference(ours, reference), TOLERANCE[torch.float64]
    return case


def _ddp_multisteps_case(rank: int, world: int) -> tuple[float, float]:
    """``MultiSteps`` accumulating 3 micro-batches under DDP, skipping the all-reduce with
    ``no_sync`` on all but the last one.

    ``p.grad`` keeps accumulating (it is not zeroed inside a window), so the last, synchronised
    backward leaves the sum over ranks and micro-batches in it; MultiSteps receives each
    micro-batch's increment of ``p.grad``, whose mean over the window is the global mean.
    """
    every_k = 3

    def run(model: nn.Module, ddp: nn.Module | None) -> dict:
        params = dict(model.named_parameters())
        tx = optax.MultiSteps(optax.adam(1e-2), every_k, accumulator_dtype=torch.float64)
        state = tx.init({name: p.detach() for name, p in params.items()})
        for step in range(2 * every_k):
            last = step % every_k == every_k - 1
            before = [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                      for p in params.values()]
            if ddp is None:
                _loss(model, _batch(torch.float64, step), None, world).backward()
            elif last:
                _loss(ddp, _batch(torch.float64, step), rank, world).backward()
            else:
                with ddp.no_sync():
                    # Unsynchronised: this rank's half of the batch, scaled as DDP averages.
                    _loss(ddp, _batch(torch.float64, step), rank, world).backward()
            increments = {name: p.grad - b for (name, p), b in zip(params.items(), before)}
            updates, state = tx.update(increments, state,
                                       {name: p.detach() for name, p in params.items()})
            with torch.no_grad():
                torch._foreach_add_(tm.leaves(params), tm.leaves(updates))
            if last:
                model.zero_grad()
        return {name: p.detach() for name, p in params.items()}

    model = _model(torch.float64)
    ddp = nn.parallel.DistributedDataParallel(model)
    return _difference(run(model, ddp), run(_model(torch.float64), None)), 1e-10


def _ddp_maml_case(rank: int, world: int) -> tuple[float, float]:
    """MAML under DDP: each rank adapts to its task (its half of the batch) with ``MetaAdam``
    (differentiable inner steps); DDP averages the meta-gradients of the query losses. One
    process computing both tasks' meta-gradients and averaging them must agree.
    """
    def meta_gradients(model: nn.Module, forward: nn.Module, local: int | None) -> dict:
        # MetaAdam swaps the module's parameters for non-leaf tensors; the meta-gradients land
        # on the original leaves, the ones DDP registered its all-reduce hooks on.
        originals = dict(model.named_parameters())
        inner = torchopt_fn.MetaAdam(model, lr=0.1)
        for step in range(2):
            inner.step(_loss(model, _batch(torch.float64, step), local, world))
        _loss(forward, _batch(torch.float64, 9), local, world).backward()
        return {name: p.grad.clone() for name, p in originals.items()}

    model = _model(torch.float64)
    ddp = nn.parallel.DistributedDataParallel(model)
    ours = meta_gradients(model, ddp, rank)
    # One process: the same two tasks (one per rank's half batch), meta-gradients averaged.
    per_task = []
    for task in range(world):
        reference_model = _model(torch.float64)
        per_task.append(meta_gradients(reference_model, reference_model, task))
    reference = {name: sum(grads[name] for grads in per_task) / world for name in ours}
    return _difference(ours, reference), 1e-10


def _meta_adam_on_fsdp_raises_case(rank: int, world: int) -> tuple[float, float]:
    """``MetaAdam`` refuses FSDP2-sharded parameters with a TypeError that says to use DDP."""
    try:
        torchopt_fn.MetaAdam(_sharded(torch.float64), lr=0.1)
    except TypeError as error:
        return (0.0 if "DistributedDataParallel" in str(error) else 1.0), 0.0
    return 1.0, 0.0


def _zero_case(rank: int, world: int) -> tuple[float, float]:
    """``ZeroRedundancyOptimizer`` sharding a ``torchopt_fn.Adam`` over the ranks under DDP."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    model = _model(torch.float64)
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torchopt_fn.Adam,
                                        lr=1e-2)
    for step in range(STEPS):
        optimizer.zero_grad()
        _loss(ddp, _batch(torch.float64, step), rank, world).backward()
        optimizer.step()
    ours = {name: p.detach() for name, p in model.named_parameters()}
    reference = _train_module_optimizer(_model(torch.float64),
                                        lambda ps: torchopt_fn.Adam(ps, lr=1e-2), None, world)
    return _difference(ours, reference), 1e-10


def cases(out_dir: str) -> dict[str, Callable[[int, int], tuple[float, float]]]:
    """All cases by name, in the order they run."""
    f32 = torch.float32
    functional = {
        "adam": lambda: optax.adam(1e-2),
        "adamw": lambda: optax.adamw(1e-2, weight_decay=0.1),
        "adam eps_root": lambda: optax.adam(1e-2, eps_root=1e-8),
        "sgd momentum": lambda: optax.sgd(1e-2, momentum=0.9, nesterov=True),
        "lion": lambda: optax.lion(1e-3),
        "lamb": lambda: optax.lamb(1e-2),
        "lars": lambda: optax.lars(1e-2),
        "fromage": lambda: optax.fromage(1e-2),
        "adafactor": lambda: optax.adafactor(1e-2, min_dim_size_to_factor=4),
        "clip_by_global_norm + adam": lambda: optax.chain(optax.clip_by_global_norm(0.05),
                                                          optax.adam(1e-2)),
        "clip + adam": lambda: optax.chain(optax.clip(0.01), optax.adam(1e-2)),
        "apply_if_finite(adam)": lambda: optax.apply_if_finite(optax.adam(1e-2), 3),
        "MultiSteps(adam, 2)": lambda: optax.MultiSteps(optax.adam(1e-2), 2),
        "contrib.muon": lambda: optax.contrib.muon(1e-2),
    }
    table: dict[str, Callable[[int, int], tuple[float, float]]] = {}
    for name, make in functional.items():
        table[f"fsdp functional {name}"] = _functional_case(make)
    for name in ("adam", "adamw", "sgd momentum", "lion", "adafactor",
                 "clip_by_global_norm + adam"):
        table[f"fsdp inplace {name}"] = _functional_case(functional[name], inplace=True)
    for name in ("adam", "clip_by_global_norm + adam"):
        table[f"fsdp float32 functional {name}"] = _functional_case(functional[name], f32)
    table["fsdp functional apply_if_finite, NaN in one rank's shard"] = (
        _apply_if_finite_nan_on_one_rank_case)
    table["DTensor leaves: projections (simplex gathers)"] = _projections_case
    table["fsdp functional lbfgs + zoom linesearch (DTensor leaves)"] = _lbfgs_case
    table["fsdp torchopt_fn.Adam"] = _optimizer_case(lambda ps: torchopt_fn.Adam(ps, lr=1e-2))
    table["fsdp torchopt_fn.Adam accelerated"] = _optimizer_case(
        lambda ps: torchopt_fn.Adam(ps, lr=1e-2, use_accelerated_op=True))
    table["fsdp torchopt_fn.AdamW"] = _optimizer_case(
        lambda ps: torchopt_fn.AdamW(ps, lr=1e-2, weight_decay=0.1))
    table["fsdp torchopt_fn.SGD momentum"] = _optimizer_case(
        lambda ps: torchopt_fn.SGD(ps, lr=1e-2, momentum=0.9, dampening=0.1))
    table["fsdp torchopt_fn.Optimizer(chain)"] = _optimizer_case(
        lambda ps: torchopt_fn.Optimizer(ps, optax.chain(optax.clip_by_global_norm(0.05),
                                                         optax.adam(1e-2))))
    table["fsdp float32 torchopt_fn.Adam"] = _optimizer_case(
        lambda ps: torchopt_fn.Adam(ps, lr=1e-2), f32)
    table["fsdp float32 torch.optim.Adam"] = _torch_adam_float32_case
    for name, make in CHECKPOINTED.items():
        table[f"dcp {name}: save on 2 ranks, load resharded on 2 ranks"] = _dcp_case(
            checkpoint_path(out_dir, name), make)
    # The weights' shards (30 elements of 60 on each rank; 30 and 20 of 50) start on block
    # boundaries, so each rank's blocks are the single process's: the numbers are the same.
    for bits in (8, 4):
        table[f"fsdp memory.quantize_state(adamw), {bits}-bit"] = _memory_case(
            lambda bits=bits: memory.quantize_state(optax.adamw(1e-2, weight_decay=0.1),
                                                    bits=bits, block_size=10, min_size=30),
            TOLERANCE[f32], bits)
    table["fsdp memory.cast_state(adam, bfloat16), to nearest"] = _memory_case(
        lambda: memory.cast_state(optax.adam(1e-2), torch.bfloat16, stochastic_rounding=False),
        TOLERANCE[f32])
    # Stochastic rounding: each rank draws at its elements' positions in the whole tensor.
    table["fsdp memory.cast_state(adam, bfloat16), stochastic"] = _memory_case(
        lambda: memory.cast_state(optax.adam(1e-2), torch.bfloat16), TOLERANCE[f32])
    table["ddp MultiSteps with no_sync"] = _ddp_multisteps_case
    table["ddp MAML MetaAdam meta-gradients"] = _ddp_maml_case
    table["fsdp MetaAdam raises, naming DDP"] = _meta_adam_on_fsdp_raises_case
    table["zero ZeroRedundancyOptimizer(torchopt_fn.Adam)"] = _zero_case
    return table


def run(rank: int, world: int, port: int, out_dir: str) -> None:
    """Runs every case on this rank and appends one JSON line per case to ``rank<r>.jsonl``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    init_device_mesh("cpu", (world,))
    with open(os.path.join(out_dir, f"rank{rank}.jsonl"), "w") as results:
        for name, case in cases(out_dir).items():
            try:
                difference, tolerance = case(rank, world)
                record = {"case": name, "difference": difference, "tolerance": tolerance}
            except Exception:  # reported to the parent, which fails that case
                record = {"case": name, "error": traceback.format_exc(limit=6)}
            results.write(json.dumps(record) + "\n")
            results.flush()
            dist.barrier()
    dist.destroy_process_group()


def checkpoint_path(out_dir: str, name: str) -> str:
    """Where the DCP case of the optimizer ``name`` (a key of ``CHECKPOINTED``) saves."""
    return os.path.join(out_dir, "checkpoint " + name.replace(" ", ""))


def load_on_one_process(checkpoint: str, make_tx: Callable[[], Any]) -> float:
    """Loads the 2-rank checkpoint of a DCP case into plain tensors in this one process (no
    process group), trains the 2 remaining steps and returns the difference with 4
    uninterrupted steps."""
    model = _model(torch.float64)
    template = make_tx().init({name: p.detach() for name, p in model.named_parameters()})
    to_load = {"model": model.state_dict(), "opt": state_to_flat_dict(template)}
    dcp.load(to_load, checkpoint_id=checkpoint, no_dist=True)
    model.load_state_dict(to_load["model"])
    ours, _ = _train_functional(model, make_tx(), None, 2, steps=2,
                                state=state_from_flat_dict(template, to_load["opt"]), first_step=2)
    reference, _ = _train_functional(_model(torch.float64), make_tx(), None, 2, steps=4)
    return _difference(ours, reference)
