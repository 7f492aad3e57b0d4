"""Whole training iterations (``zero_grad()``, forward, backward, ``step()``) against torch.optim.

``bench_step.py`` times the step alone. A trainer runs the step inside an iteration, after a
backward pass that (with torch's default ``zero_grad(set_to_none=True)``) makes new ``.grad``
tensors each time. The fused ``TorchOptimizer`` reads the gradients from its packed buffer, so
it copies such new ones there first; torch.optim's fused kernels read them where they are.
This benchmark shows what that costs in a whole iteration, for both ``zero_grad`` settings.

The model is the step benchmarks' parameters (sizes (a)-(d), see ``bench_step.py``), each
multiplied elementwise by a fixed tensor of its shape and summed: backward makes one new
gradient per parameter, as a layer's would, and costs little else. Each cell is the median
iteration time in ms (iterations of the implementations alternated, as in
``bench_step.sample_times``), with the step's own share after a slash.

``python benchmarks/bench_iteration.py --threads 1 --first-cpu 1 --keep-freed-memory``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import torch
from _results import write_markdown
from bench_step import (
    LEARNING_RATE,
    MOMENTUM,
    SIZES,
    WEIGHT_DECAY,
    add_step_options,
    optax_compat_alias,
    parse_step_options,
    random_tensors,
    sample_times,
    shapes_for,
)

import optax_compat
import torchopt_fn

OPTIMIZERS = ("sgd", "adam", "adamw")
NONE = "\N{EN DASH}"


def _torch(name: str, implementation: str) -> Callable[[list[torch.Tensor]], torch.optim.Optimizer]:
    cls, kwargs = {"sgd": (torch.optim.SGD, {"momentum": MOMENTUM}),
                   "adam": (torch.optim.Adam, {}),
                   "adamw": (torch.optim.AdamW, {"weight_decay": WEIGHT_DECAY})}[name]
    return lambda params: cls(params, lr=LEARNING_RATE, **kwargs, **{implementation: True})


def _torchopt_fn(name: str) -> Callable[[list[torch.Tensor]], torch.optim.Optimizer]:
    cls, kwargs = {"sgd": (torchopt_fn.SGD, {"momentum": MOMENTUM}),
                   "adam": (torchopt_fn.Adam, {}),
                   "adamw": (torchopt_fn.AdamW, {"weight_decay": WEIGHT_DECAY})}[name]
    return lambda params: cls(params, lr=LEARNING_RATE, **kwargs, fused=True)


IMPLEMENTATIONS: dict[str, Callable[[str], Callable[[list[torch.Tensor]],
                                                    torch.optim.Optimizer]]] = {
    "TorchOptimizer fused": lambda name: lambda params: optax_compat.TorchOptimizer(
        params, optax_compat_alias(name), fused=True),
    "torchopt_fn fused": _torchopt_fn,
    "torch fused": lambda name: _torch(name, "fused"),
    "torch foreach": lambda name: _torch(name, "foreach"),
}


class Iteration:
    """One training iteration of ``optimizer`` on the benchmark's model; records the step's
    own seconds in :attr:`step_seconds`."""

    def __init__(self, make: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
                 shapes: list[tuple[int, int]], set_to_none: bool) -> None:
        self.params = [p.requires_grad_() for p in random_tensors(shapes, 0)]
        self.factors = random_tensors(shapes, 1)
        self.optimizer = make(self.params)
        self.set_to_none = set_to_none
        self.step_seconds: list[float] = []

    def __call__(self) -> None:
        self.optimizer.zero_grad(set_to_none=self.set_to_none)
        loss = sum((p * f).sum() for p, f in zip(self.params, self.factors, strict=True))
        loss.backward()
        start = time.perf_counter()
        self.optimizer.step()
        self.step_seconds.append(time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_options(parser, sizes="a,b,c,d", optimizers=OPTIMIZERS, repeats=20, warmup=3)
    parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS),
                        help=f"comma-separated among {', '.join(IMPLEMENTATIONS)}")
    args = parse_step_options(parser)
    labels = args.implementations.split(",")
    ratio = "TorchOptimizer fused ÷ torch fused"
    columns = ["model", "optimizer", "set_to_none", *(f"{label}: iteration / step ms"
                                                      for label in labels),
               f"{ratio}: iteration", "step"]
    rows: list[list[str]] = []
    for size in args.sizes.split(","):
        total, count = SIZES[size]
        shapes = shapes_for(int(total * args.scale), count)
        for name in args.optimizers.split(","):
            for set_to_none in (True, False):
                iterations = {label: Iteration(IMPLEMENTATIONS[label](name), shapes, set_to_none)
                              for label in labels}
                times = sample_times(iterations, args.repeats, args.warmup)
                whole = {label: statistics.median(times[label]) for label in labels}
                step = {label: statistics.median(it.step_seconds[-args.repeats:])
                        for label, it in iterations.items()}
                cells = [f"{whole[label] * 1e3:.3g} / {step[label] * 1e3:.3g}"
                         for label in labels]
                pair = ("TorchOptimizer fused", "torch fused")
                ratios = ([f"{whole[pair[0]] / whole[pair[1]]:.2f}",
                           f"{step[pair[0]] / step[pair[1]]:.2f}"]
                          if all(label in labels for label in pair) else [NONE, NONE])
                rows.append([size, name, str(set_to_none), *cells, *ratios])
                print(" | ".join(rows[-1]), flush=True)
    if args.markdown:
        write_markdown(args.markdown, columns, rows)


if __name__ == "__main__":
    main()
