"""Optimizer step time and optimizer-state bytes per rank under FSDP2, 1 rank vs 2 ranks.

Each configuration spawns ``world`` CPU processes (gloo on 127.0.0.1, a free port), shards an
MLP of ``--layers`` square ``Linear`` layers of width ``--width`` (10.6M float32 parameters by
default) with ``fully_shard`` (per layer, then the root), and trains it with a functional
``optax_compat`` optimizer: forward, backward, then ``update`` + an in-place add of the
updates into the sharded parameters. Reported per rank (rank 0; the ranks are symmetric):

* ``step ms``: the median time of ``update`` + apply (the optimizer's share of a step), over
  ``--repeats`` steps after ``--warmup``;
* ``state MB``: the bytes of the optimizer state's tensors held by the rank (the local shard
  of each DTensor leaf, plain tensors whole);
* the ratio of the 2-rank state bytes to the 1-rank ones.

Run ``python benchmarks/bench_distributed.py --threads 1``; on a machine shared with other
jobs the times move, the bytes do not.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import optax_compat as optax
from optax_compat._runtime import tree_math

OPTIMIZERS = {
    "adam": lambda: optax.adam(1e-3),
    "adafactor": lambda: optax.adafactor(1e-3),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _local_bytes(tree: object) -> int:
    total = 0
    for leaf in tree_math.leaves(tree):
        if isinstance(leaf, torch.Tensor):
            local = leaf.to_local() if isinstance(leaf, DTensor) else leaf
            total += local.numel() * local.element_size()
    return total


def _worker(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(args.width, args.width) for _ in range(args.layers)])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    params = dict(model.named_parameters())
    x = torch.randn(args.batch, args.width)
    lines = []
    for name in args.optimizers:
        tx = OPTIMIZERS[name]()
        state = tx.init({key: p.detach() for key, p in params.items()})
        times = []
        for step in range(args.warmup + args.repeats):
            model.zero_grad()
            model(x).square().mean().backward()
            grads = {key: p.grad for key, p in params.items()}
            start = time.perf_counter()
            updates, state = tx.update(grads, state, {k: p.detach() for k, p in params.items()})
            with torch.no_grad():
                torch._foreach_add_(tree_math.leaves(params), tree_math.leaves(updates))
            if step >= args.warmup:
                times.append(time.perf_counter() - start)
        lines.append(f"{name}\t{world}\t{statistics.median(times) * 1e3:.2f}\t"
                     f"{_local_bytes(state)}\n")
        del state
    if rank == 0:
        with open(out, "w") as file:
            file.writelines(lines)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1152)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS),
                        choices=list(OPTIMIZERS))
    args = parser.parse_args()
    parameters = args.layers * (args.width * args.width + args.width)
    print(f"FSDP2 MLP, {parameters / 1e6:.1f}M float32 parameters, CPU, gloo, "
          f"{args.threads} thread(s) per rank; optimizer step = update + apply\n")
    rows: dict[tuple[str, int], tuple[float, int]] = {}
    with tempfile.TemporaryDirectory() as directory:
        for world in (1, 2):
            out = os.path.join(directory, f"world{world}.tsv")
            torch.multiprocessing.start_processes(_worker, args=(world, _free_port(), args, out),
                                                  nprocs=world, start_method="spawn")
            with open(out) as file:
                lines = file.read().splitlines()
            for line in lines:
                name, _, milliseconds, state_bytes = line.split("\t")
                rows[(name, world)] = (float(milliseconds), int(state_bytes))
    print("| optimizer | ranks | step ms (rank 0) | state MB per rank | state vs 1 rank |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.optimizers:
        for world in (1, 2):
            milliseconds, state_bytes = rows[(name, world)]
            ratio = state_bytes / rows[(name, 1)][1]
            print(f"| {name} | {world} | {milliseconds:.1f} | {state_bytes / 2 ** 20:.2f} | "
                  f"{ratio:.3f} |")


if __name__ == "__main__":
    main()
