"""Times one optimizer step (update + apply) of optax_compat against torch.optim, TorchOpt, Optax.

Run ``python benchmarks/bench_step.py`` for the full table, or e.g.
``python benchmarks/bench_step.py --sizes a --optimizers adam --repeats 10`` for a quick look.

Every implementation runs in this one process on the same parameter shapes, CPU, float32:

* ``optax_compat``: the pure alias, ``update`` then ``apply_updates`` (new tensors each step);
* ``optax_compat inplace``: the in-place path, the alias's whole in-place step
  (``optax_compat.inplace_step``, PyTorch's fused kernel on the alias's own state) for
  Adam/AdamW and ``update(..., inplace=True)`` followed
  by an in-place add for the others (shown only where the transforms accept ``inplace``);
* ``torch.optim foreach`` / ``fused``: ``step()`` with the gradients already in ``.grad``;
* ``torchopt``: TorchOpt 0.7.3 with ``inplace=True`` (only if it is importable);
* ``optax jit``: ``jax.jit`` of update + apply_updates (only if JAX and Optax are importable).

Sizes: (a) 4M parameters in 100 tensors, (b) 1M in 1000, (c) 32M in 200, (d) 1M in 10,000;
tensors are 2-D so that Adafactor factors them. A time is the median over ``--repeats`` steps
after ``--warmup`` steps. Ratios are against ``torch.optim foreach`` of the same optimizer
(Lion, which torch.optim lacks, is compared with ``torch.optim.Adam`` foreach;
``torch.optim.Adafactor`` is a different variant of the algorithm than Optax's and serves only
as a yardstick).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import torch
from _results import add_markdown_option, write_markdown

import optax_compat
import torchopt_fn

SIZES = {"a": (4_000_000, 100), "b": (1_000_000, 1000), "c": (32_000_000, 200),
         "d": (1_000_000, 10_000)}
OPTIMIZERS = ("adam", "adamw", "sgd", "lion", "adafactor")
LEARNING_RATE = 1e-3
WEIGHT_DECAY = 1e-2
MOMENTUM = 0.9

Step = Callable[[], None]
Setup = Callable[[list[tuple[int, int]]], Step]
# The device every benchmark builds its tensors on (``--device``; see :func:`use_device`).
DEVICE = torch.device("cpu")
# Whether the ``torch.optim``-style steps find new ``.grad`` tensors before each step
# (``--fresh-gradients``; see :func:`gradients_in_grad`).
FRESH_GRADIENTS = False


def use_device(device: str | torch.device) -> None:
    """Builds the benchmarks' tensors on ``device`` from now on (the same values as on the CPU:
    they are drawn there and copied), and times steps on it (:func:`synchronize`)."""
    global DEVICE
    DEVICE = torch.device(device)
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {device}: torch {torch.__version__} sees no CUDA GPU")


def synchronize() -> None:
    """Waits for the work queued on :data:`DEVICE` (a no-op on the CPU), so that a wall-clock
    interval around a step holds the step's kernels, not only their launches."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def shapes_for(total: int, count: int) -> list[tuple[int, int]]:
    """``count`` near-square matrices of about ``total / count`` elements each."""
    per_tensor = total // count
    rows = int(math.sqrt(per_tensor))
    return [(rows, per_tensor // rows)] * count


def random_tensors(shapes: list[tuple[int, int]], seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator).to(DEVICE) for shape in shapes]


# ----------------------------------------------------------------------------------------------
# optax_compat.


def optax_compat_alias(name: str) -> Any:
    return {
        "adam": lambda: optax_compat.adam(LEARNING_RATE),
        "adamw": lambda: optax_compat.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY),
        "sgd": lambda: optax_compat.sgd(LEARNING_RATE, momentum=MOMENTUM),
        "lion": lambda: optax_compat.lion(LEARNING_RATE),
        "adafactor": lambda: optax_compat.adafactor(LEARNING_RATE),
    }[name]()


def pure_step(tx: Any, shapes: list[tuple[int, int]],
              extra_args: dict[str, float] | None = None, *, compiled: bool = False) -> Step:
    """``tx.update`` then ``optax_compat.apply_updates`` (new tensors every step).

    ``extra_args`` are passed to ``update`` as scalar tensors (e.g. ``value`` for Polyak SGD).
    With ``compiled``, the two run under ``torch.compile(fullgraph=True)``, as JAX code runs
    Optax's under ``jax.jit``; the step then has ``compile_seconds``, the seconds of its first
    call (which compiles).
    """
    params, grads = random_tensors(shapes, 0), random_tensors(shapes, 1)
    kwargs = {key: torch.tensor(value) for key, value in (extra_args or {}).items()}
    current = {"params": params, "state": tx.init(params)}

    def update(params: Any, state: Any) -> tuple[Any, Any]:
        updates, state = tx.update(grads, state, params, **kwargs)
        return optax_compat.apply_updates(params, updates), state

    if compiled:
        # Every step built here shares ``update``'s code, and Dynamo recompiles one piece of
        # code at most 8 times: each step compiles afresh, as a program of its own would.
        torch._dynamo.reset()
    run = torch.compile(update, fullgraph=True) if compiled else update

    def step() -> None:
        start = time.perf_counter()
        current["params"], current["state"] = run(current["params"], current["state"])
        if compiled and not hasattr(step, "compile_seconds"):
            step.compile_seconds = time.perf_counter() - start  # type: ignore[attr-defined]

    return step


def ours_pure(name: str) -> Setup:
    return lambda shapes: pure_step(optax_compat_alias(name), shapes)


def update_inplace(tx: Any, shapes: list[tuple[int, int]]) -> Step:
    """``tx.update(..., inplace=True)`` then an in-place add (the multi-tensor in-place path).

    ``inplace=True`` writes the updates into the incoming gradients (as TorchOpt does), so each
    step gets a fresh copy of them; the copy is not timed (``prepare``).
    """
    params, grads = random_tensors(shapes, 0), random_tensors(shapes, 1)
    current = {"state": tx.init(params)}
    scratch = list(torch._foreach_mul(grads, 1.0))

    def step() -> None:
        updates, current["state"] = tx.update(scratch, current["state"], params, inplace=True)
        torch._foreach_add_(params, updates)

    step.prepare = lambda: torch._foreach_copy_(scratch, grads)  # type: ignore[attr-defined]
    return step


def whole_inplace_step(tx: Any, shapes: list[tuple[int, int]]) -> Step:
    """The alias's whole in-place step, ``optax_compat.inplace_step(tx)`` (not ``None``)."""
    params, grads = random_tensors(shapes, 0), random_tensors(shapes, 1)
    step = optax_compat.inplace_step(tx)
    current = {"state": tx.init(params)}

    def run() -> None:
        current["state"] = step(params, grads, current["state"])

    return run


def ours_inplace(name: str) -> Setup:
    if name in ("adam", "adamw"):
        return lambda shapes: whole_inplace_step(optax_compat_alias(name), shapes)
    return lambda shapes: update_inplace(optax_compat_alias(name), shapes)


def ours_update_inplace(name: str) -> Setup | None:
    """``update(..., inplace=True)`` for the aliases whose in-place row is the whole step."""
    if name not in ("adam", "adamw"):
        return None
    return lambda shapes: update_inplace(optax_compat_alias(name), shapes)


def torchopt_fn_optimizer(name: str, accelerated: bool) -> Setup | None:
    """``torchopt_fn.Adam``/``AdamW`` (``use_accelerated_op``) ``step()`` with ``.grad`` set."""
    if name not in ("adam", "adamw"):
        return None

    def setup(shapes: list[tuple[int, int]]) -> Step:
        params, grads = random_tensors(shapes, 0), random_tensors(shapes, 1)
        if name == "adam":
            optimizer = torchopt_fn.Adam(params, lr=LEARNING_RATE,
                                         use_accelerated_op=accelerated)
        else:
            optimizer = torchopt_fn.AdamW(params, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY,
                                          use_accelerated_op=accelerated)

        def prepare() -> None:
            for param, grad in zip(params, grads):
                param.grad = grad.clone()

        step = optimizer.step
        prepare()
        return _with_prepare(lambda: step(), prepare)

    return setup


def _with_prepare(step: Callable[[], Any], prepare: Callable[[], None]) -> Step:
    def run() -> None:
        step()

    run.prepare = prepare  # type: ignore[attr-defined]
    return run


# ----------------------------------------------------------------------------------------------
# torch.optim.


def torch_optim(name: str, implementation: str) -> Setup | None:
    classes: dict[str, tuple[type, dict]] = {
        "adam": (torch.optim.Adam, {}),
        "adamw": (torch.optim.AdamW, {"weight_decay": WEIGHT_DECAY}),
        "sgd": (torch.optim.SGD, {"momentum": MOMENTUM}),
        "lion": (torch.optim.Adam, {}),  # no Lion in torch.optim: Adam as the yardstick
    }
    if hasattr(torch.optim, "Adafactor"):
        classes["adafactor"] = (torch.optim.Adafactor, {"lr": 1e-2})
    if name not in classes:
        return None
    cls, kwargs = classes[name]
    if implementation == "fused" and (name == "lion" or cls is getattr(torch.optim, "Adafactor",
                                                                        None)):
        return None
    kwargs = {"lr": LEARNING_RATE, **kwargs, implementation: True}
    return lambda shapes: torch_step(cls, kwargs, shapes)


def gradients_in_grad(params: list[torch.Tensor], shapes: list[tuple[int, int]]
                      ) -> Callable[[], None] | None:
    """Puts gradients in the ``.grad`` of ``params``.

    Returns:
      With ``--fresh-gradients``, what gives them new ``.grad`` tensors of the same values
      before each step (a step's untimed ``prepare``), as backward makes them after
      ``zero_grad()`` (torch's default ``set_to_none=True``); else ``None``: the same tensors
      stay, as backward into zeroed gradients (``set_to_none=False``) leaves them.
    """
    grads = random_tensors(shapes, 1)
    for param, grad in zip(params, grads, strict=True):
        param.grad = grad
    if not FRESH_GRADIENTS:
        return None

    def prepare() -> None:
        for param, grad in zip(params, grads, strict=True):
            param.grad = grad.clone()

    return prepare


def torch_step(cls: type, kwargs: dict[str, Any], shapes: list[tuple[int, int]]) -> Step:
    """``cls(params, **kwargs).step`` with the gradients in ``.grad`` (see
    :func:`gradients_in_grad`)."""
    params = [p.requires_grad_() for p in random_tensors(shapes, 0)]
    prepare = gradients_in_grad(params, shapes)
    step = cls(params, **kwargs).step
    return step if prepare is None else _with_prepare(step, prepare)


# ----------------------------------------------------------------------------------------------
# TorchOpt and Optax, when installed.


def torchopt_step(name: str) -> Setup | None:
    try:
        import torchopt
    except Exception:  # torchopt 0.7.3 can fail in many ways on current torch: skip it
        return None
    factories = {
        "adam": lambda: torchopt.adam(LEARNING_RATE),
        "adamw": lambda: torchopt.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY),
        "sgd": lambda: torchopt.sgd(LEARNING_RATE, momentum=MOMENTUM),
    }
    if name not in factories:
        return None
    return lambda shapes: torchopt_inplace_step(factories[name](), shapes)


def torchopt_inplace_step(tx: Any, shapes: list[tuple[int, int]]) -> Step:
    """TorchOpt's ``update(..., inplace=True)`` then ``torchopt.apply_updates(inplace=True)``."""
    import torchopt

    params, grads = tuple(random_tensors(shapes, 0)), tuple(random_tensors(shapes, 1))
    current = {"state": tx.init(params)}

    def step() -> None:
        updates, current["state"] = tx.update(grads, current["state"], params=params,
                                              inplace=True)
        torchopt.apply_updates(params, updates, inplace=True)

    return step


def optax_jit(name: str) -> Setup | None:
    try:
        import optax
    except Exception:  # no JAX on this machine: skip the column
        return None
    factories = {
        "adam": lambda: optax.adam(LEARNING_RATE),
        "adamw": lambda: optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY),
        "sgd": lambda: optax.sgd(LEARNING_RATE, momentum=MOMENTUM),
        "lion": lambda: optax.lion(LEARNING_RATE),
        "adafactor": lambda: optax.adafactor(LEARNING_RATE),
    }
    return lambda shapes: jitted_step(factories[name](), shapes)


def jitted_step(tx: Any, shapes: list[tuple[int, int]],
                extra_args: dict[str, float] | None = None) -> Step:
    """Optax's ``update`` + ``apply_updates`` compiled ahead of time by ``jax.jit``.

    The step has two attributes: ``compile_seconds`` (tracing, lowering and XLA compilation)
    and ``peak_bytes``, XLA's own account of the memory one call allocates (temporaries, and
    outputs that do not reuse an input buffer).
    """
    import jax
    import jax.numpy as jnp
    import optax

    device = jax.devices("gpu" if DEVICE.type == "cuda" else "cpu")[0]
    params = [jax.device_put(t.cpu().numpy(), device) for t in random_tensors(shapes, 0)]
    grads = [jax.device_put(t.cpu().numpy(), device) for t in random_tensors(shapes, 1)]
    kwargs = {key: jnp.asarray(value) for key, value in (extra_args or {}).items()}

    def update(params: Any, state: Any, grads: Any) -> tuple[Any, Any]:
        updates, state = tx.update(grads, state, params, **kwargs)
        return optax.apply_updates(params, updates), state

    current = {"params": params, "state": tx.init(params)}
    start = time.perf_counter()
    compiled = jax.jit(update).lower(current["params"], current["state"], grads).compile()
    compile_seconds = time.perf_counter() - start
    memory = compiled.memory_analysis()

    def step() -> None:
        current["params"], current["state"] = compiled(current["params"], current["state"],
                                                       grads)
        jax.block_until_ready(current["params"])

    step.compile_seconds = compile_seconds  # type: ignore[attr-defined]
    step.peak_bytes = (  # type: ignore[attr-defined]
        memory.temp_size_in_bytes + memory.output_size_in_bytes - memory.alias_size_in_bytes)
    return step


# ----------------------------------------------------------------------------------------------


def implementations(name: str) -> list[tuple[str, Setup | None]]:
    return [
        ("torch.optim foreach", torch_optim(name, "foreach")),
        ("torch.optim fused", torch_optim(name, "fused")),
        ("optax_compat", ours_pure(name)),
        ("optax_compat inplace", ours_inplace(name)),
        ("optax_compat update(inplace)", ours_update_inplace(name)),
        ("torchopt_fn.Adam", torchopt_fn_optimizer(name, False)),
        ("torchopt_fn.Adam accel", torchopt_fn_optimizer(name, True)),
        ("torchopt", torchopt_step(name)),
        ("optax jit", optax_jit(name)),
    ]


STREAMING_BYTES_PER_ELEMENT = 12


def streaming_step(total: int) -> Step:
    """``a.add_(b)`` over ``total`` float32 values: the yardstick of a streaming limit.

    It reads 8 bytes and writes 4 per value, and every byte it counts crosses the memory bus
    once, as in an optimizer step, which reads each buffer it overwrites. ``dst.copy_(src)``
    is no such yardstick: its destination is not read, but the CPU fetches each line before
    writing it (write-allocate), so a copy moves 12 bytes per value while 8 are counted, and
    its "bandwidth" is about two thirds of what the bus gives an in-place step (measured on
    this machine over 256 MiB, 1 thread: copy 17-22 GB/s, in-place add 24-36 GB/s).
    """
    a, b = torch.randn(total, device=DEVICE), torch.randn(total, device=DEVICE)
    return lambda: a.add_(b)  # values grow by |b| per call: no overflow in any run


def keep_freed_memory() -> None:
    """Stops glibc from giving freed tensor memory back to the OS after every step.

    A pure step allocates its outputs (new moments, updates, params) and frees the previous
    ones. By default glibc trims the top of the heap and unmaps large blocks on free, so every
    step page-faults its fresh buffers in again (about 1.5 us per 4 KiB page: ~6 ms per 16 MB).
    Raising the trim and mmap thresholds keeps the memory in the process, as jemalloc or
    tcmalloc (recommended by PyTorch's CPU tuning guide) do. In-place steps are unaffected.
    """
    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_trim_threshold, 1 << 30)
    libc.mallopt(m_mmap_threshold, 1 << 28)


def sample_times(steps: dict[str, Step], repeats: int, warmup: int,
                 budget: float = math.inf) -> dict[str, list[float]]:
    """Seconds of each timed step of each implementation, timed in alternation.

    Alternating (one step of each implementation per round) keeps the ratios fair when the
    machine's load changes during the run. A step's ``prepare()`` attribute, if any, runs
    untimed before it. An implementation whose steps (warm-up included) have taken more than
    ``budget`` seconds in all leaves the rounds once it has one timed step. Python's garbage
    collector is off during each timed step, as in ``timeit``: otherwise a step pays for
    collecting the objects the others left (with 10,000 leaves, Lion's in-place step took
    265 ms with it on and 201 ms with it off, alternating with its pure step).
    """
    times: dict[str, list[float]] = {label: [] for label in steps}
    spent = dict.fromkeys(steps, 0.0)
    for round_index in range(warmup + repeats):
        for label, step in steps.items():
            if spent[label] > budget and times[label]:
                continue
            getattr(step, "prepare", lambda: None)()
            gc.disable()
            try:
                synchronize()
                start = time.perf_counter()
                step()
                synchronize()
                elapsed = time.perf_counter() - start
            finally:
                gc.enable()
            spent[label] += elapsed
            if round_index >= warmup or spent[label] > budget:
                times[label].append(elapsed)
    return times


def median_times(steps: dict[str, Step], repeats: int, warmup: int) -> dict[str, float]:
    """Median seconds per step of each implementation (see :func:`sample_times`)."""
    return {label: statistics.median(values)
            for label, values in sample_times(steps, repeats, warmup).items()}


def add_step_options(parser: argparse.ArgumentParser, *, sizes: str, optimizers: Sequence[str],
                     repeats: int, warmup: int) -> None:
    """The options of the step benchmarks: models, optimizers, steps, scale, threads, output."""
    parser.add_argument("--sizes", default=sizes,
                        help="comma-separated among a (4M/100), b (1M/1000), c (32M/200), "
                             "d (1M/10,000)")
    parser.add_argument("--optimizers", default=",".join(optimizers),
                        help=f"comma-separated among {', '.join(optimizers)}")
    parser.add_argument("--repeats", type=int, default=repeats, help="timed steps (median)")
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed steps first")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every size's parameter count (e.g. 0.1 for a quick run)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads, and the number of CPUs the process may run "
                             "on (default: leave PyTorch's choice, no pinning)")
    parser.add_argument("--first-cpu", type=int, default=0,
                        help="with --threads N: run on the N allowed CPUs from this one")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="tell glibc malloc to keep freed memory instead of returning it "
                             "to the OS (see keep_freed_memory)")
    parser.add_argument("--device", default="cpu",
                        help="where the tensors live and the steps run (cpu, cuda, cuda:1)")
    parser.add_argument("--fresh-gradients", action="store_true",
                        help="torch.optim-style steps find new .grad tensors before each step, "
                             "as backward makes them after zero_grad() (set_to_none=True); by "
                             "default the same ones stay, as with zero_grad(set_to_none=False)")
    add_markdown_option(parser)


def limit_threads(threads: int, first_cpu: int = 0) -> None:
    """Runs torch on ``threads`` threads and pins the process to ``threads`` CPUs.

    The pinning holds every library to the same CPUs: XLA's CPU client in JAX 0.10 does not
    honour ``--xla_cpu_multi_thread_eigen=false`` and ran Muon's matrix products on both cores
    of a two-core machine (1.7 CPU-seconds per second) while torch had one. Threads started
    later (XLA's pools) inherit the affinity, so call this before JAX is first used.
    """
    torch.set_num_threads(threads)
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[(first_cpu + i) % len(allowed)] for i in range(threads)})


def parse_step_options(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parses the command line; applies ``--threads``/``--first-cpu``,
    ``--keep-freed-memory`` and ``--fresh-gradients``."""
    global FRESH_GRADIENTS
    args = parser.parse_args()
    FRESH_GRADIENTS = args.fresh_gradients
    if args.threads:
        limit_threads(args.threads, args.first_cpu)
    if args.keep_freed_memory:
        keep_freed_memory()
    use_device(args.device)
    return args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_options(parser, sizes="a,b,c", optimizers=OPTIMIZERS, repeats=20, warmup=3)
    args = parse_step_options(parser)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, {DEVICE}; "
          f"median of {args.repeats} alternated steps after {args.warmup} warm-up rounds; "
          f"glibc keeps freed memory: {args.keep_freed_memory}")
    header = f"{'size':<6}{'optimizer':<11}{'implementation':<22}{'ms':>10}{'x foreach':>11}"
    print(header)
    print("-" * len(header))
    rows: list[list[str]] = []
    for size in args.sizes.split(","):
        total, count = SIZES[size]
        shapes = shapes_for(int(total * args.scale), count)
        for name in args.optimizers.split(","):
            steps: dict[str, Step] = {}
            for label, setup in implementations(name):
                if setup is None:
                    continue
                try:
                    steps[label] = setup(shapes)
                    steps[label]()  # fails early if, e.g., ``inplace`` is not supported
                except TypeError as error:
                    print(f"{size:<6}{name:<11}{label:<22}{'n/a':>10}   ({error})")
                    rows.append([size, name, label, "n/a", str(error)])
                    steps.pop(label, None)
            medians = median_times(steps, args.repeats, args.warmup)
            baseline = medians.get("torch.optim foreach")
            for label, seconds in medians.items():
                ratio = f"{seconds / baseline:>11.2f}" if baseline else f"{'':>11}"
                print(f"{size:<6}{name:<11}{label:<22}{seconds * 1e3:>10.2f}{ratio}",
                      flush=True)
                rows.append([size, name, label, f"{seconds * 1e3:.2f}", ratio.strip()])
            steps.clear()
            gc.collect()
    if args.markdown:
        write_markdown(args.markdown, ["model", "optimizer", "implementation", "ms",
                                       "x torch.optim foreach"], rows)


if __name__ == "__main__":
    main()
