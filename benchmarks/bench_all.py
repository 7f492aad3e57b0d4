"""One optimizer step of every Optax alias: optax_compat's paths, torch.optim, TorchOpt, Optax.

``python benchmarks/bench_all.py --threads 1`` measures everything (hours at full size);
``python benchmarks/bench_all.py --scale 0.01 --repeats 2`` runs end to end in a minute or two.

Models (CPU, float32, near-square 2-D tensors so that Adafactor factors them): (a) 4M parameters
in 100 tensors, (b) 1M in 1,000, (c) 32M in 200, (d) 1M in 10,000, each multiplied by
``--scale``. Optimizers: every top-level alias of ``optax_compat`` (what its ``__init__``
imports from the alias module: the 31 of ``optax``'s top level) and the ``contrib`` aliases
acprop, ademamix, adopt, prodigy, schedule_free_adamw and muon, with the learning rate 1e-3 and
otherwise their defaults (``sgd`` with momentum 0.9, ``lbfgs`` without line search,
``polyak_sgd`` given the loss value 1). Implementations, each timed on one step (update + apply):

* ``ours pure``: ``update`` then ``apply_updates`` (new tensors every step);
* ``ours compiled``: the same two under ``torch.compile(fullgraph=True)``, as JAX code runs
  Optax's under ``jax.jit`` (new tensors every step); its compile seconds are reported;
* ``ours in-place``: ``optax_compat.inplace_step(tx)`` where the alias has one (Adam, AdamW),
  else ``update(..., inplace=True)`` then an in-place add where the alias declares ``inplace``;
* ``ours fused``: ``optax_compat.fused_step(tx, params)``, the gradients already in its flat
  gradient buffer (as ``grads_as_views=True`` leaves them; torch.optim finds them in ``.grad``);
  a dash when optax_compat lacks it or refuses the transformation (``ValueError``); its
  compile seconds are reported;
* ``TorchOptimizer`` / ``TorchOptimizer fused``: ``optax_compat.TorchOptimizer(params, tx)``
  and ``TorchOptimizer(params, tx, fused=True)``, ``step()`` with the gradients in ``.grad``
  (the fused one copies them into its gradient buffer at its first step and keeps them there as
  views, as a backward pass into zeroed gradients would leave them; with ``--fresh-gradients``
  every step finds new ``.grad`` tensors, as after ``zero_grad()``, and the fused one copies
  them at every step); a dash where the fused one steps unfused; its compile seconds are
  reported;
* ``torchopt_fn fused``: ``torchopt_fn.Adam``/``AdamW``/``SGD(params, ..., fused=True)``, as
  ``TorchOptimizer fused``;
* ``torch foreach`` / ``torch fused``: ``torch.optim``'s class for the algorithm with
  ``foreach=True`` / ``fused=True``, where it has one (Muon, which has a single
  implementation, in the foreach column). Only Adam, AdamW and SGD compute Optax's numbers;
  the others (marked ``*``) are other variants of the algorithm (epsilon placement, initial
  accumulator, decay schedules), yardsticks only;
* ``torchopt``: TorchOpt 0.7.3's function of the same name with ``inplace=True``, if it imports;
* ``optax jit``: Optax's update + apply compiled ahead of time with ``jax.jit``, if JAX imports;
  its compile seconds are reported.

Streaming limit: the bytes a step must move at least, i.e. read the gradient and the parameter,
write the parameter, read and write every element of the optimizer state once,
``itemsize * (3 * parameters + 2 * state elements)`` (20 B per parameter for SGD with momentum,
28 B for Adam; the state is counted on the alias's own ``init``), divided by the streaming
bandwidth (bytes read plus written by an in-place add of two 256 MiB tensors,
``bench_step.streaming_step``, measured at the start of each model's run; a ``copy_`` would
understate it by about a third, its destination being fetched before it is written). Muon's matrix
products and L-BFGS's history make those two compute-bound, so the limit is only a floor there;
at small ``--scale`` the tensors fit in the caches and a step may beat it.

Peak memory per step: the most memory a step holds above what it held when it began, on the third
step (state allocated, compilation done). For the PyTorch implementations it comes
from ``torch.profiler`` with ``profile_memory=True``, which records every allocation and free of
PyTorch's CPU allocator in order: the maximum of their running sum is exact, and unlike the
process's resident-set high-water mark it does not depend on glibc (a pure step that reuses
the blocks the previous step freed adds no resident pages, yet allocates). XLA's allocations
are not PyTorch's, so the Optax column is XLA's own account of the compiled step
(``memory_analysis()``: temporaries plus outputs that do not reuse an input). The profiled step
is not timed; it is skipped (a dash) when the first step took more than a tenth of the budget.
On a GPU (``--device cuda``) every tensor lives there, each timed step ends with
``torch.cuda.synchronize()``, Optax runs on JAX's GPU, and the peak is the CUDA caching
allocator's own (``max_memory_allocated``) over the third step.

Time budget: each implementation's setup (first step, compilation included, and the memory
step) must end within ``--budget`` seconds or the cell is skipped and marked ``>Ns``. Compilers
cannot be interrupted (XLA compiles Optax's Muon over 10,000 tensors for tens of minutes), so
each model runs in a worker process, which this script kills when a cell overruns; a new
worker carries on with the next cell. Timed steps are interleaved (one step of each
implementation per round) and the median is reported; an implementation whose steps have used
the budget leaves the rounds (after at least one timed step) and its time is marked ``~``.
Ctrl-C (or SIGTERM) stops the workers and writes what was measured.
With ``--threads N`` each worker is pinned to N CPUs (``--jobs`` workers to distinct ones), so
XLA, which does not keep to one thread when asked, runs on as many CPUs as torch.

Output: one table of milliseconds with the streaming limit and the ratios of our fastest path
to the limit and to Optax jit, one of peak memory and compile seconds, and a PNG plot of step
time against parameter count per implementation (``--plot``, next to ``--markdown`` by default).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import inspect
import json
import math
import os
import pathlib
import queue
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import bench_step
import torch
from _results import write_markdown
from bench_step import (
    LEARNING_RATE,
    MOMENTUM,
    SIZES,
    STREAMING_BYTES_PER_ELEMENT,
    Step,
    add_step_options,
    jitted_step,
    parse_step_options,
    pure_step,
    random_tensors,
    sample_times,
    shapes_for,
    streaming_step,
    synchronize,
    torch_step,
    torchopt_inplace_step,
    update_inplace,
    whole_inplace_step,
)
from custom_optimizers import CUSTOM

import optax_compat
from optax_compat._runtime import inplace as bb_inplace
from optax_compat._runtime import tree_math as tm

CONTRIB = ("acprop", "ademamix", "adopt", "prodigy", "schedule_free_adamw", "muon")
# The optimizers ``optax_compat/__init__.py`` imports from its alias module (as Optax's does).
ALIASES = tuple(sorted(
    name.strip()
    for blocks in re.findall(r"from optax_compat\._src\.alias import (?:\(([^)]*)\)|(.+))",
                             inspect.getsource(optax_compat))
    for name in ",".join(blocks).split(",")
    if callable(getattr(optax_compat, name.strip(), None))))
# Written by hand with the public API, as a user would (custom_optimizers.py), with JAX twins.
OPTIMIZERS = ALIASES + CONTRIB + tuple(CUSTOM)
IMPLEMENTATIONS = ("ours pure", "ours compiled", "ours in-place", "ours fused", "TorchOptimizer",
                   "TorchOptimizer fused", "torchopt_fn fused", "torch foreach", "torch fused",
                   "torchopt", "optax jit")
OURS = IMPLEMENTATIONS[:7]
# Their compile seconds are reported.
COMPILED = ("ours compiled", "ours fused", "TorchOptimizer fused", "torchopt_fn fused",
            "optax jit")

# Constructor arguments after the learning rate, the same for optax_compat, Optax and TorchOpt.
ARGUMENTS: dict[str, dict[str, Any]] = {"sgd": {"momentum": MOMENTUM},
                                        "lbfgs": {"linesearch": None}}
UPDATE_ARGUMENTS: dict[str, dict[str, float]] = {"polyak_sgd": {"value": 1.0}}
# torch.optim's class for the algorithm, its arguments, and whether it computes Optax's numbers.
TORCH_OPTIM: dict[str, tuple[str, dict[str, Any], bool]] = {
    "adam": ("Adam", {}, True),
    "adamw": ("AdamW", {"weight_decay": 1e-4}, True),
    "sgd": ("SGD", {"momentum": MOMENTUM}, True),
    "adadelta": ("Adadelta", {}, False),
    "adafactor": ("Adafactor", {}, False),
    "adagrad": ("Adagrad", {}, False),
    "adamax": ("Adamax", {}, False),
    "amsgrad": ("Adam", {"amsgrad": True}, False),
    "muon": ("Muon", {}, False),
    "nadam": ("NAdam", {}, False),
    "nadamw": ("NAdam", {"decoupled_weight_decay": True, "weight_decay": 1e-4}, False),
    "radam": ("RAdam", {}, False),
    "rmsprop": ("RMSprop", {"alpha": 0.9}, False),
    "rprop": ("Rprop", {}, False),
}
STREAM_ELEMENTS = 64 * 2**20  # float32: 256 MiB per tensor
NONE = "\N{EN DASH}"  # a cell with nothing to measure
MEASURED = "bench_all: measured step"  # profiler range
MESSAGE = "@bench_all "  # prefix of the worker's protocol lines on its stdout

Shapes = list[tuple[int, int]]


def make(module: Any, name: str) -> Any:
    """The optimizer ``name`` of ``module`` (``optax_compat``, ``optax`` or ``torchopt``)."""
    if name in CUSTOM:
        if module.__name__ not in ("optax_compat", "optax"):
            raise AttributeError(f"{module.__name__} has no {name}")
        return CUSTOM[name][module.__name__ == "optax"](LEARNING_RATE)
    owner = module.contrib if name in CONTRIB else module
    return getattr(owner, name)(LEARNING_RATE, **ARGUMENTS.get(name, {}))


# ----------------------------------------------------------------------------------------------
# Implementations: ``setup(name, shapes)`` returns the step, or ``None`` where there is none.


def ours_pure(name: str, shapes: Shapes) -> Step:
    return pure_step(make(optax_compat, name), shapes, UPDATE_ARGUMENTS.get(name))


def ours_compiled(name: str, shapes: Shapes) -> Step:
    return pure_step(make(optax_compat, name), shapes, UPDATE_ARGUMENTS.get(name),
                     compiled=True)


def ours_inplace(name: str, shapes: Shapes) -> Step | None:
    tx = make(optax_compat, name)
    if optax_compat.inplace_step(tx) is not None:
        return whole_inplace_step(tx, shapes)
    if name in UPDATE_ARGUMENTS or not bb_inplace.declares_inplace(tx.update):
        return None
    return update_inplace(tx, shapes)


class FusedStep:
    """``optax_compat.fused_step(tx, params)`` applied to fixed gradients."""

    def __init__(self, name: str, shapes: Shapes) -> None:
        params = random_tensors(shapes, 0)
        self.step = optax_compat.fused_step(make(optax_compat, name), params)
        # The gradients sit in the flat gradient buffer, as backward leaves them with
        # ``grads_as_views=True`` (torch.optim's steps likewise find them in ``.grad``).
        for view, grad in zip(self.step.grads, random_tensors(shapes, 1), strict=True):
            view.copy_(grad)

    def __call__(self) -> None:
        self.step(self.step.grads)

    @property
    def compile_seconds(self) -> float:
        return self.step.compile_seconds


def ours_fused(name: str, shapes: Shapes) -> Step | None:
    if not hasattr(optax_compat, "fused_step") or name in UPDATE_ARGUMENTS:
        return None
    try:
        return FusedStep(name, shapes)
    except ValueError:  # a chain no packed layout fits
        return None


# torchopt_fn's class for the alias, with the arguments that give the alias's numbers.
TORCHOPT_FN: dict[str, tuple[str, dict[str, Any]]] = {
    "adam": ("Adam", {}), "adamw": ("AdamW", {"weight_decay": 1e-4}),
    "sgd": ("SGD", {"momentum": MOMENTUM})}


class OptimizerStep:
    """``optax_compat.TorchOptimizer(params, tx, fused=...).step`` (or a ``torchopt_fn``
    class's) with the gradients in ``.grad``, as for torch.optim's classes (the fused one keeps
    them as views of its gradient buffer after the first step, as a backward pass into zeroed
    gradients leaves them)."""

    def __init__(self, name: str, shapes: Shapes, fused: bool, torchopt_fn: bool = False
                 ) -> None:
        params = [p.requires_grad_() for p in random_tensors(shapes, 0)]
        prepare = bench_step.gradients_in_grad(params, shapes)
        if prepare is not None:
            self.prepare = prepare
        if torchopt_fn:
            import torchopt_fn as module

            cls, kwargs = TORCHOPT_FN[name]
            self.optimizer = getattr(module, cls)(params, lr=LEARNING_RATE, **kwargs,
                                                  fused=fused)
        else:
            self.optimizer = optax_compat.TorchOptimizer(params, make(optax_compat, name),
                                                         fused=fused)
        self.extra = UPDATE_ARGUMENTS.get(name)

    def __call__(self) -> None:
        self.optimizer.step((lambda: self.extra["value"]) if self.extra else None)

    @property
    def compile_seconds(self) -> float:
        return self.optimizer.compile_seconds


def torch_optimizer(fused: bool, torchopt_fn: bool = False
                    ) -> Callable[[str, Shapes], Step | None]:
    def setup(name: str, shapes: Shapes) -> Step | None:
        if not fused:
            return OptimizerStep(name, shapes, fused=False)
        if not hasattr(optax_compat.TorchOptimizer, "compile_seconds") or (
                torchopt_fn and name not in TORCHOPT_FN):
            return None
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*steps unfused")  # no fused cell
            step = OptimizerStep(name, shapes, fused=True, torchopt_fn=torchopt_fn)
            try:
                step()
            except UserWarning:
                return None
        return step

    return setup


def torch_optim(implementation: str) -> Callable[[str, Shapes], Step | None]:
    def setup(name: str, shapes: Shapes) -> Step | None:
        if name not in TORCH_OPTIM or not hasattr(torch.optim, TORCH_OPTIM[name][0]):
            return None
        cls = getattr(torch.optim, TORCH_OPTIM[name][0])
        accepted = inspect.signature(cls).parameters
        if implementation not in accepted and not (implementation == "foreach"
                                                   and "fused" not in accepted):
            return None
        flag = {implementation: True} if implementation in accepted else {}
        return torch_step(cls, {"lr": LEARNING_RATE, **TORCH_OPTIM[name][1], **flag}, shapes)

    return setup


def torchopt(name: str, shapes: Shapes) -> Step | None:
    try:
        import torchopt as module
    except Exception:  # TorchOpt 0.7.3 can fail in many ways on current torch: skip it
        return None
    if name in CONTRIB or not hasattr(module, name):
        return None
    return torchopt_inplace_step(make(module, name), shapes)


def optax_jit(name: str, shapes: Shapes) -> Step | None:
    try:
        import optax
    except Exception:  # no JAX: skip the column
        return None
    return jitted_step(make(optax, name), shapes, UPDATE_ARGUMENTS.get(name))


SETUPS: dict[str, Callable[[str, Shapes], Step | None]] = {
    "ours pure": ours_pure,
    "ours compiled": ours_compiled,
    "ours in-place": ours_inplace,
    "ours fused": ours_fused,
    "TorchOptimizer": torch_optimizer(fused=False),
    "TorchOptimizer fused": torch_optimizer(fused=True),
    "torchopt_fn fused": torch_optimizer(fused=True, torchopt_fn=True),
    "torch foreach": torch_optim("foreach"),
    "torch fused": torch_optim("fused"),
    "torchopt": torchopt,
    "optax jit": optax_jit,
}


# ----------------------------------------------------------------------------------------------
# Measurements.


def streaming_bandwidth() -> float:
    """Bytes per second read plus written by ``bench_step.streaming_step`` (an in-place add of
    two 256 MiB tensors; median)."""
    step = streaming_step(STREAM_ELEMENTS)
    times = []
    for _ in range(7):
        synchronize()
        start = time.perf_counter()
        step()
        synchronize()
        times.append(time.perf_counter() - start)
    return STREAMING_BYTES_PER_ELEMENT * STREAM_ELEMENTS / statistics.median(times[1:])


def streaming_bytes(name: str, shapes: Shapes) -> int:
    """Bytes a step must move: read g and p, write p, read and write each state element."""
    params = random_tensors(shapes, 0)
    state = make(optax_compat, name).init(params)
    state_elements = sum(leaf.numel() for leaf in tm.leaves(state)
                         if isinstance(leaf, torch.Tensor) and leaf.is_floating_point())
    parameters = sum(param.numel() for param in params)
    return params[0].element_size() * (3 * parameters + 2 * state_elements)


def peak_bytes(step: Step) -> int:
    """The most bytes PyTorch's allocator holds during ``step()`` above the level at its start.

    ``torch.profiler`` records each allocation and free of the CPU allocator with its size
    (negative for a free), but not the free of a block allocated before it started: so it
    records two steps, and the peak is the maximum of the running sum during the second one,
    whose frees are of blocks the first allocated.
    """
    prepare = getattr(step, "prepare", lambda: None)
    if bench_step.DEVICE.type == "cuda":  # the caching allocator counts its own peak
        prepare()
        step()
        prepare()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - start
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profiler:
        prepare()
        step()
        prepare()
        with torch.profiler.record_function(MEASURED):
            step()
    events = list(profiler.profiler.kineto_results.events())
    measured = next(event for event in events if event.name() == MEASURED)
    live = peak = start = 0
    for event in sorted((event for event in events if event.name() == "[memory]"),
                        key=lambda event: event.start_ns()):
        if event.start_ns() < measured.start_ns():
            start = live = live + event.nbytes()
        elif event.start_ns() <= measured.end_ns():
            live += event.nbytes()
            peak = max(peak, live - start)
    return peak


# ----------------------------------------------------------------------------------------------
# Worker: one model, the optimizers in order, protocol messages on stdout.


def emit(**message: Any) -> None:
    print(MESSAGE + json.dumps(message), flush=True)


def set_up(name: str, label: str, shapes: Shapes, budget: float) -> tuple[Step | None, dict]:
    """Builds one implementation, runs its first step and measures its peak memory."""
    cell: dict[str, Any] = {"optimizer": name, "implementation": label}
    try:
        step = SETUPS[label](name, shapes)
        if step is None:
            return None, {**cell, "status": "absent"}
        getattr(step, "prepare", lambda: None)()
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
        if hasattr(step, "compile_seconds"):
            cell["compile_seconds"] = step.compile_seconds
            first -= step.compile_seconds  # profiling costs steps, not compilations
        if hasattr(step, "peak_bytes"):
            cell["peak_bytes"] = step.peak_bytes
        elif first < budget / 10:
            cell["peak_bytes"] = peak_bytes(step)
        return step, {**cell, "status": "ok"}
    except Exception as error:  # an implementation that fails is reported, not fatal
        return None, {**cell, "status": "error", "error": f"{type(error).__name__}: {error}"}


def worker(args: argparse.Namespace) -> None:
    warnings.simplefilter("ignore")
    skip = set(filter(None, args.skip.split(",")))
    total, count = SIZES[args.size]
    shapes = shapes_for(max(int(total * args.scale), count), count)
    bandwidth = streaming_bandwidth()
    emit(bandwidth=bandwidth, parameters=sum(rows * cols for rows, cols in shapes))
    for name in args.optimizers.split(","):
        steps: dict[str, Step] = {}
        for label in args.implementations.split(","):
            if f"{name}/{label}" in skip:
                continue
            emit(begin=[name, label])
            step, cell = set_up(name, label, shapes, args.budget)
            emit(cell=cell)
            if step is not None:
                steps[label] = step
        emit(begin=[name, "timing"], implementations=len(steps))
        times = sample_times(steps, args.repeats, args.warmup, args.budget)
        emit(row={"optimizer": name,
                  "limit": streaming_bytes(name, shapes) / bandwidth,
                  "times": {label: [statistics.median(values), len(values)]
                            for label, values in times.items()}})
        steps.clear()
        gc.collect()


# ----------------------------------------------------------------------------------------------
# Parent: runs and restarts the workers, keeps the results, prints, writes and plots.


class Results:
    """Everything measured, keyed by model and optimizer."""

    def __init__(self, budget: float, repeats: int,
                 implementations: Sequence[str] = IMPLEMENTATIONS) -> None:
        self.budget, self.repeats = budget, repeats
        self.implementations = tuple(implementations)  # the columns, in IMPLEMENTATIONS' order
        self.parameters: dict[str, int] = {}
        self.bandwidth: dict[str, float] = {}
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}
        self.done: list[tuple[str, str]] = []  # the rows measured to the end, in order

    def row(self, size: str, name: str) -> dict[str, Any]:
        return self.rows.setdefault((size, name), {"cells": {}, "times": {}, "limit": None})

    def time_text(self, size: str, name: str, label: str) -> str:
        row = self.rows[size, name]
        cell = row["cells"].get(label, {"status": "absent"})
        if cell["status"] == "overrun":
            return f">{self.budget:g}s"
        if cell["status"] == "error":
            return "error"
        if label not in row["times"]:
            return NONE if cell["status"] == "absent" else f">{self.budget:g}s"
        seconds, count = row["times"][label]
        yardstick = label.startswith("torch ") and not TORCH_OPTIM[name][2]
        return (f"{seconds * 1e3:.3g}" + ("~" if count < self.repeats else "")
                + ("*" if yardstick else ""))

    def fastest_ours(self, size: str, name: str) -> float | None:
        times = self.rows[size, name]["times"]
        return min((times[label][0] for label in OURS if label in times), default=None)

    def time_columns(self) -> list[str]:
        return ["model", "optimizer", "limit ms", *self.implementations, "ours ÷ limit",
                "ours ÷ optax"]

    def time_row(self, size: str, name: str) -> list[str]:
        row = self.rows[size, name]
        fastest, limit = self.fastest_ours(size, name), row["limit"]
        optax = row["times"].get("optax jit", [None])[0]
        return [size, name, NONE if limit is None else f"{limit * 1e3:.3g}",
                *(self.time_text(size, name, label) for label in self.implementations),
                NONE if fastest is None or limit is None else f"{fastest / limit:.2f}",
                NONE if fastest is None or optax is None else f"{fastest / optax:.2f}"]

    def memory_columns(self) -> list[str]:
        return ["model", "optimizer", *(f"{label} MB" for label in self.implementations),
                *(f"{label} compile s" for label in COMPILED if label in self.implementations)]

    def memory_row(self, size: str, name: str) -> list[str]:
        cells = self.rows[size, name]["cells"]

        def peak(label: str) -> str:
            value = cells.get(label, {}).get("peak_bytes")
            return NONE if value is None else f"{value / 2**20:.3g}"

        def compile_seconds(label: str) -> str:
            value = cells.get(label, {}).get("compile_seconds")
            return NONE if value is None else f"{value:.3g}"

        return [size, name, *(peak(label) for label in self.implementations),
                *(compile_seconds(label) for label in COMPILED if label in self.implementations)]

    def errors(self) -> list[str]:
        return [f"{size} {name} {label}: {cell['error']}"
                for (size, name), row in self.rows.items()
                for label, cell in row["cells"].items() if cell["status"] == "error"]


def worker_command(args: argparse.Namespace, size: str, optimizers: list[str],
                   skip: set[str], first_cpu: int) -> list[str]:
    command = [sys.executable, __file__, "--worker", "--size", size,
               "--first-cpu", str(first_cpu),
               "--optimizers", ",".join(optimizers), "--skip", ",".join(sorted(skip)),
               "--scale", str(args.scale), "--repeats", str(args.repeats),
               "--warmup", str(args.warmup), "--budget", str(args.budget),
               "--threads", str(args.threads), "--implementations", args.implementations,
               "--device", args.device]
    return (command + (["--keep-freed-memory"] if args.keep_freed_memory else [])
            + (["--fresh-gradients"] if args.fresh_gradients else []))


def worker_environment(threads: int) -> dict[str, str]:
    environment = {**os.environ, "TORCH_CPP_LOG_LEVEL": "ERROR"}  # quiet profiler warnings
    if threads == 1:
        environment["XLA_FLAGS"] = (environment.get("XLA_FLAGS", "")
                                    + " --xla_cpu_multi_thread_eigen=false"
                                    " intra_op_parallelism_threads=1").strip()
    return environment


class Workers:
    """The worker processes running, and whether the run is being stopped."""

    def __init__(self) -> None:
        self.running: set[subprocess.Popen] = set()
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()
        for process in list(self.running):
            process.kill()


def run_model(args: argparse.Namespace, size: str, results: Results,
              on_row: Callable[[str, str], None], workers: Workers, first_cpu: int) -> None:
    """Runs ``size``'s optimizers in workers, restarting after a cell overruns its budget.

    With ``--threads N`` the workers run on the N CPUs from ``first_cpu``."""
    pending = args.optimizers.split(",")
    skip: set[str] = set()
    while pending and not workers.stopping.is_set():
        process = subprocess.Popen(worker_command(args, size, pending, skip, first_cpu),
                                   stdout=subprocess.PIPE, text=True,
                                   env=worker_environment(args.threads))
        workers.running.add(process)
        lines: queue.Queue[str | None] = queue.Queue()

        def read(stream: Any = process.stdout, into: queue.Queue = lines) -> None:
            for line in stream:
                into.put(line)
            into.put(None)

        threading.Thread(target=read, daemon=True).start()
        current: list[str] | None = None
        deadline = math.inf
        while True:
            try:
                line = lines.get(timeout=None if deadline == math.inf
                                 else max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                line, failure = None, "overrun"
                process.kill()
            else:
                failure = "crashed"
            if line is None:
                process.wait()
                workers.running.discard(process)
                if workers.stopping.is_set():
                    return
                if current is None:  # the worker ended between cells
                    if process.returncode != 0:
                        sys.exit(f"worker for model {size} failed before its first cell")
                    pending = []
                    break
                name, label = current
                print(f"{size} {name} {label}: {failure}"
                      + (f" after {args.budget:g} s" if failure == "overrun" else ""),
                      flush=True)
                if label == "timing":
                    pending = pending[pending.index(name) + 1:]
                    on_row(size, name)
                else:
                    results.row(size, name)["cells"][label] = {"status": "overrun"}
                    skip.add(f"{name}/{label}")
                    pending = pending[pending.index(name):]
                break
            if not line.startswith(MESSAGE):
                sys.stdout.write(line)
                continue
            message = json.loads(line[len(MESSAGE):])
            if "bandwidth" in message:
                results.bandwidth[size] = message["bandwidth"]
                results.parameters[size] = message["parameters"]
            elif "begin" in message:
                current = message["begin"]
                deadline = time.monotonic() + (
                    2 * args.budget * message["implementations"] + 30 if current[1] == "timing"
                    else args.budget + 5)
            elif "cell" in message:
                cell = message["cell"]
                results.row(size, cell["optimizer"])["cells"][cell["implementation"]] = cell
                if cell["status"] == "error":  # now: a run cut short keeps the reason
                    print(f"{size} {cell['optimizer']} {cell['implementation']}: "
                          f"{cell['error']}", flush=True)
                current, deadline = None, math.inf
            else:
                row = results.row(size, message["row"]["optimizer"])
                row["times"], row["limit"] = message["row"]["times"], message["row"]["limit"]
                pending = pending[pending.index(message["row"]["optimizer"]) + 1:]
                current, deadline = None, math.inf
                on_row(size, message["row"]["optimizer"])


def plot(results: Results, path: str) -> None:
    """Step time against parameter count, one panel per optimizer, one line per implementation.

    Models (b) and (d) have the same parameter count (1,000 and 10,000 tensors): both points are
    drawn, labelled with the model's letter.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.lines
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    names = list(dict.fromkeys(name for size, name in results.done
                               if results.rows[size, name]["times"]))
    if not names:
        return
    labels = [*results.implementations, "streaming limit"]
    colors = {label: f"C{index}"  # the same colour for an implementation in every plot
              for index, label in enumerate([*IMPLEMENTATIONS, "streaming limit"])}
    drawn: set[str] = set()
    columns = min(6, len(names))
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(rows, columns, squeeze=False,
                                figsize=(max(3.2 * columns, 9), 2.6 * rows + 0.4))
    for axis, name in zip(axes.flat, names):
        sizes = sorted((size for size, other in results.done
                        if other == name and results.rows[size, other]["times"]),
                       key=lambda size: (results.parameters[size], size))
        series = {label: [(results.parameters[size], results.rows[size, name]["times"][label][0])
                          for size in sizes if label in results.rows[size, name]["times"]]
                  for label in results.implementations}
        series["streaming limit"] = [(results.parameters[size], results.rows[size, name]["limit"])
                                     for size in sizes
                                     if results.rows[size, name]["limit"] is not None]
        for label, points in series.items():
            if points:
                axis.plot(*zip(*[(x, y * 1e3) for x, y in points]), marker="o", markersize=3,
                          color=colors[label], label=label,
                          linestyle="--" if label == "streaming limit" else "-")
                drawn.add(label)
        for size in sizes:
            times = results.rows[size, name]["times"]
            if "ours pure" in times:
                axis.annotate(size, (results.parameters[size], times["ours pure"][0] * 1e3),
                              fontsize=7)
        axis.set(xscale="log", yscale="log", title=name)
        axis.title.set_fontsize(9)
        axis.tick_params(labelsize=7)
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for axis in axes.flat[len(names):]:
        axis.axis("off")
    shown = [label for label in labels if label in drawn]
    figure.legend([matplotlib.lines.Line2D([], [], color=colors[label], marker="o",
                                           linestyle="--" if label == "streaming limit" else "-")
                   for label in shown], shown, loc="upper center", ncol=len(shown), fontsize=8)
    figure.supxlabel("parameters (points of ours pure labelled with the model)", fontsize=9)
    figure.supylabel("ms per step", fontsize=9)
    figure.tight_layout(rect=(0.01, 0, 1, 1 - 0.35 / figure.get_figheight()))
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=110)
    plt.close(figure)


def read_markdown(paths: list[str]) -> Results:
    """The step times of saved ``--markdown`` tables, for :func:`plot` (a later table's row
    replaces an earlier one's for the same model and optimizer). Each table's header says
    which implementations its columns hold."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    done: list[tuple[str, str]] = []
    for path in paths:
        columns: list[str] = []
        for line in pathlib.Path(path).read_text().splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if cells[:2] == ["model", "optimizer"]:  # the times' header, or the memory's
                columns = cells if cells[2] == "limit ms" else []
                continue
            if len(cells) != len(columns) or cells[0] not in SIZES:
                continue
            texts = dict(zip(columns, cells, strict=True))
            row = rows[cells[0], cells[1]] = {"cells": {}, "times": {}, "limit": None}
            row["limit"] = _milliseconds(texts["limit ms"])
            for label in IMPLEMENTATIONS:
                if _milliseconds(texts.get(label, NONE)) is not None:
                    row["times"][label] = (_milliseconds(texts[label]), 1)
            if (cells[0], cells[1]) not in done:
                done.append((cells[0], cells[1]))
    found = {label for row in rows.values() for label in row["times"]}
    results = Results(budget=0.0, repeats=0,
                      implementations=[label for label in IMPLEMENTATIONS if label in found])
    results.rows, results.done = rows, done
    for size in {size for size, _ in done}:
        results.parameters[size] = sum(r * c for r, c in shapes_for(*SIZES[size]))
    return results


def _milliseconds(text: str) -> float | None:
    """Seconds of a table cell in ms (``12.3``, ``1.2e+03~``, ``45*``), ``None`` for none."""
    try:
        return float(text.rstrip("~*")) / 1e3
    except ValueError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_options(parser, sizes="a,b,c,d", optimizers=OPTIMIZERS, repeats=10, warmup=2)
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds per cell: an implementation's setup and first step, and "
                             "its share of the timed rounds")
    parser.add_argument("--plot", metavar="PATH", default=None,
                        help="PNG of step time against parameters (default: the --markdown "
                             "path with .png, no plot without --markdown)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="models measured at the same time, one worker each (faster, "
                             "noisier)")
    parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS),
                        help="the columns to measure, comma-separated (default: all)")
    parser.add_argument("--replot", nargs="+", metavar="MARKDOWN", default=None,
                        help="measure nothing: draw --plot from these saved --markdown tables "
                             "(all their sizes in one plot)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    parser.add_argument("--skip", default="", help=argparse.SUPPRESS)
    args = parse_step_options(parser)
    if args.worker:
        worker(args)
        return
    if args.replot:
        if not args.plot:
            parser.error("--replot needs --plot PATH")
        plot(read_markdown(args.replot), args.plot)
        print(f"plot: {args.plot}")
        return
    unknown = set(args.optimizers.split(",")) - set(OPTIMIZERS)
    if unknown or not set(args.sizes.split(",")) <= set(SIZES):
        parser.error(f"unknown optimizers {sorted(unknown)} or sizes {args.sizes}")
    chosen = args.implementations.split(",")
    if not set(chosen) <= set(IMPLEMENTATIONS):
        parser.error(f"unknown implementations {sorted(set(chosen) - set(IMPLEMENTATIONS))}; "
                     f"known: {', '.join(IMPLEMENTATIONS)}")
    args.implementations = ",".join(label for label in IMPLEMENTATIONS if label in chosen)

    results = Results(args.budget, args.repeats, args.implementations.split(","))
    widths = [6, 20, 9, *([14] * len(results.implementations)), 14, 14]

    def line(cells: list[str]) -> str:
        return "".join(f"{cell:>{width}}" if index > 1 else f"{cell:<{width}}"
                       for index, (cell, width) in enumerate(zip(cells, widths)))

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, "
          f"{args.device}; {'new' if args.fresh_gradients else 'kept'} .grad tensors; median "
          f"of {args.repeats} interleaved steps after {args.warmup}; budget {args.budget:g} s "
          f"per cell; ms (* another variant of the algorithm, ~ fewer steps: budget)")
    print(line(results.time_columns()), flush=True)
    plot_path = args.plot or (str(pathlib.Path(args.markdown).with_suffix(".png"))
                              if args.markdown else None)
    lock = threading.Lock()

    def on_row(size: str, name: str) -> None:
        with lock:
            results.done.append((size, name))
            print(line(results.time_row(size, name)), flush=True)
            if args.markdown:  # rewritten at every row: an interrupted run keeps its rows
                save_markdown(args.markdown, results)

    workers = Workers()

    free_cpus: queue.Queue[int] = queue.Queue()  # one block of --threads CPUs per job
    for job in range(args.jobs):
        free_cpus.put(job * max(args.threads, 1))

    def run(size: str) -> None:
        first_cpu = free_cpus.get()
        try:
            run_model(args, size, results, on_row, workers, first_cpu)
        finally:
            free_cpus.put(first_cpu)
        if workers.stopping.is_set():
            return
        with lock:
            bandwidth = results.bandwidth.get(size, math.nan) / 1e9
            print(f"model {size}: {results.parameters.get(size, 0):,} parameters, streaming "
                  f"bandwidth {bandwidth:.1f} GB/s", flush=True)
            if plot_path:
                plot(results, plot_path)

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        try:
            for future in [pool.submit(run, size) for size in args.sizes.split(",")]:
                future.result()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: stop the workers, keep the results
            print("interrupted: the tables and the plot hold what was measured", flush=True)
            workers.stop()
            if plot_path:
                plot(results, plot_path)
    print("\npeak memory per step (MB above the step's start) and compile seconds")
    for row in [results.memory_columns(), *(results.memory_row(*key) for key in results.done)]:
        print("  ".join(row))
    for error in results.errors():
        print("error:", error)
    if plot_path:
        print(f"plot: {plot_path}")


def save_markdown(path: str, results: Results) -> None:
    bandwidths = ", ".join(f"({size}) {results.parameters[size]:,} parameters, "
                           f"{results.bandwidth[size] / 1e9:.1f} GB/s"
                           for size in results.bandwidth)
    keys = sorted(results.done, key=lambda key: (key[0], OPTIMIZERS.index(key[1])))
    budget = f"{results.budget:g}"
    write_markdown(
        path, results.time_columns(), [results.time_row(*key) for key in keys],
        more=[(f"Peak memory per step in MB above the step's start, and compile seconds. Models "
               f"and streaming bandwidths (in-place add): {bandwidths}. In the table above: ms "
               f"per step, `*` another variant of the algorithm, `~` fewer timed steps (budget "
               f"{budget} s), `>{budget}s` skipped, `{NONE}` none.",
               results.memory_columns(), [results.memory_row(*key) for key in keys])])


if __name__ == "__main__":
    main()
