"""Seconds of the first ``torch.compile``\\ d call of an Adam step over many small tensors.

What a user waits for before a compiled step runs, for our Adam and ``torch.optim.Adam``
(foreach, under ``torch.compile``, PyTorch's recipe for compiling an optimizer), on ``N``
float32 tensors of 8x8 (``--tensors``), with gradients in place:

* ``optax_compat pure``: ``update`` + ``apply_updates`` of ``optax_compat.adam`` compiled with
  ``fullgraph=True`` (as JAX code jits Optax's);
* ``TorchOptimizer`` and ``TorchOptimizer in-place``: ``torch.compile(opt.step)`` of
  ``optax_compat.TorchOptimizer(params, adam(...))``, pure and ``inplace=True``;
* ``torchopt_fn.Adam``: ``torch.compile(opt.step)``;
* ``torch.optim.Adam``: ``torch.compile(opt.step)``, ``foreach=True``.

Each cell runs in a process of its own with Inductor's caches off
(``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``), so every number is a cold first call. With
``--backend eager`` the graph is captured and run as it is: the seconds are Dynamo's tracing;
with ``inductor`` (the default) they include generating and compiling the kernels. Run
``python benchmarks/bench_first_compile.py --threads 1 --tensors 100,1000 --backend eager``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import torch
from _results import add_markdown_option, write_markdown
from bench_step import limit_threads

import optax_compat
import torchopt_fn

IMPLEMENTATIONS = ("optax_compat pure", "TorchOptimizer", "TorchOptimizer in-place",
                   "torchopt_fn.Adam", "torch.optim.Adam")
LEARNING_RATE = 1e-3


def first_call_seconds(implementation: str, tensors: int, backend: str) -> float:
    """Builds the step of ``implementation`` over ``tensors`` tensors and times its first
    compiled call."""
    generator = torch.Generator().manual_seed(0)
    params = [torch.randn(8, 8, generator=generator, requires_grad=True) for _ in range(tensors)]
    for param in params:
        param.grad = torch.randn(8, 8, generator=generator)
    if implementation == "optax_compat pure":
        tx = optax_compat.adam(LEARNING_RATE)
        values, grads = [p.detach() for p in params], [p.grad for p in params]
        state = tx.init(values)

        def pure_step(values: list, state: object, grads: list) -> tuple:
            updates, state = tx.update(grads, state, values)
            return optax_compat.apply_updates(values, updates), state

        compiled = torch.compile(pure_step, backend=backend, fullgraph=True)
        start = time.perf_counter()
        compiled(values, state, grads)
        return time.perf_counter() - start
    optimizer = {
        "TorchOptimizer": lambda: optax_compat.TorchOptimizer(
            params, optax_compat.adam(LEARNING_RATE)),
        "TorchOptimizer in-place": lambda: optax_compat.TorchOptimizer(
            params, optax_compat.adam(LEARNING_RATE), inplace=True),
        "torchopt_fn.Adam": lambda: torchopt_fn.Adam(params, LEARNING_RATE),
        "torch.optim.Adam": lambda: torch.optim.Adam(params, LEARNING_RATE, foreach=True),
    }[implementation]()
    compiled = torch.compile(optimizer.step, backend=backend)
    start = time.perf_counter()
    compiled()
    return time.perf_counter() - start


def cell(implementation: str, tensors: int, args: argparse.Namespace) -> str:
    """One measurement in a fresh process with Inductor's caches off."""
    command = [sys.executable, __file__, "--worker", implementation, "--tensors", str(tensors),
               "--backend", args.backend, "--threads", str(args.threads),
               "--first-cpu", str(args.first_cpu)]
    env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True,
                                timeout=args.timeout, check=True)
    except subprocess.TimeoutExpired:
        return f">{args.timeout:g}s"
    except subprocess.CalledProcessError as error:
        last = (error.stderr.strip().splitlines() or ["?"])[-1]
        print(f"{implementation} over {tensors}: failed: {last}", file=sys.stderr)
        return "fail"
    return f"{float(result.stdout.strip().splitlines()[-1]):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", default="100", help="comma-separated tensor counts")
    parser.add_argument("--backend", default="inductor", choices=("inductor", "eager"))
    parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS),
                        help="comma-separated among: " + ", ".join(IMPLEMENTATIONS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--first-cpu", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per cell")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    add_markdown_option(parser)
    args = parser.parse_args()
    limit_threads(args.threads, args.first_cpu)
    warnings.filterwarnings("ignore")
    if args.worker is not None:
        print(first_call_seconds(args.worker, int(args.tensors), args.backend))
        return
    implementations = args.implementations.split(",")
    unknown = sorted(set(implementations) - set(IMPLEMENTATIONS))
    if unknown:
        parser.error(f"unknown implementations {unknown}; choose among {IMPLEMENTATIONS}")
    columns = ["tensors", *(f"{name} s" for name in implementations)]
    print(f"first compiled call, {args.backend} backend, caches off, {args.threads} thread(s)")
    print("  ".join(columns))
    rows = []
    for tensors in map(int, args.tensors.split(",")):
        rows.append([str(tensors), *(cell(name, tensors, args) for name in implementations)])
        print("  ".join(rows[-1]), flush=True)
    if args.markdown:
        write_markdown(args.markdown, columns, rows)


if __name__ == "__main__":
    main()
