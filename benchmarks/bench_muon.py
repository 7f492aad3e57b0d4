"""Times one Muon step (update + apply) of optax_compat against Optax under ``jax.jit``.

``python benchmarks/bench_muon.py --threads 1`` (defaults: eight 256x256 float32 matrices).

Rows: ``optax_compat muon`` (the pure alias), ``optax jit`` (``jax.jit`` of update +
apply_updates, if JAX and Optax import), and, for the Newton-Schulz part alone,
``orthogonalize batched`` (all matrices stacked, as the alias does) against
``orthogonalize per matrix`` (one call per matrix). Each row is the median over ``--repeats``
steps after ``--warmup`` steps, timed in alternation so that load drifts hit all rows alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import torch
from _results import add_markdown_option, write_markdown
from bench_step import limit_threads

import optax_compat
from optax_compat.contrib import _muon

Step = Callable[[], None]


def torch_muon_step(params: dict, grads: dict) -> Step:
    tx = _muon.muon(1e-3)
    state = {"params": params, "opt": tx.init(params)}

    def step() -> None:
        updates, state["opt"] = tx.update(grads, state["opt"], state["params"])
        state["params"] = optax_compat.apply_updates(state["params"], updates)

    return step


def optax_muon_step(params: dict, grads: dict) -> Step | None:
    try:
        import jax
        import optax
    except ImportError:
        return None
    tx = optax.contrib.muon(1e-3)
    jax_params = {k: jax.numpy.asarray(v.numpy()) for k, v in params.items()}
    jax_grads = {k: jax.numpy.asarray(v.numpy()) for k, v in grads.items()}

    @jax.jit
    def update(params, opt_state, grads):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    state = {"params": jax_params, "opt": tx.init(jax_params)}

    def step() -> None:
        state["params"], state["opt"] = update(state["params"], state["opt"], jax_grads)
        jax.block_until_ready(state["params"])

    return step


def orthogonalize_steps(grads: dict) -> dict[str, Step]:
    coeffs = torch.tensor(_muon._DEFAULT_NS_COEFFS)
    matrices = list(grads.values())
    dims = [None] * len(matrices)
    return {
        "orthogonalize batched": lambda: _muon._orthogonalize_leaves(
            matrices, dims, coeffs, 5, "frobenius", 1e-8),
        "orthogonalize per matrix": lambda: [
            _muon.orthogonalize_via_newton_schulz(m, coeffs) for m in matrices],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads, and as many CPUs pinned (limit_threads)")
    add_markdown_option(parser)
    args = parser.parse_args()
    if args.threads:
        limit_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    params = {f"w{i}": torch.randn(args.size, args.size, generator=generator)
              for i in range(args.count)}
    grads = {name: torch.randn(p.shape, generator=generator) for name, p in params.items()}
    steps: dict[str, Step] = {"optax_compat muon": torch_muon_step(params, grads)}
    optax_step = optax_muon_step(params, grads)
    if optax_step is not None:
        steps["optax jit"] = optax_step
    steps.update(orthogonalize_steps(grads))
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    print(f"{args.count} x {args.size}x{args.size} float32, torch threads "
          f"{torch.get_num_threads()}")
    for name, samples in times.items():
        print(f"{name:28s} {1e3 * statistics.median(samples):8.2f} ms")
    if args.markdown:
        write_markdown(args.markdown, ["step", "ms"],
                       [[name, f"{1e3 * statistics.median(samples):.2f}"]
                        for name, samples in times.items()])


if __name__ == "__main__":
    main()
