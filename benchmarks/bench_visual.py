"""Measures torchopt_fn.visual: node counts with and without fusion, build and layout times.

Run: ``python benchmarks/bench_visual.py --threads 1`` (``--timeout S`` bounds each Graphviz
layout, 60 s by default; ``--sizes 200 1000`` picks the graph sizes).

Prints
* the number of drawn nodes for MAML inner loops (``MetaSGD`` and ``MetaAdam``, 2 and 20 steps)
  on a small MLP, with and without optimizer fusion, the number of autograd nodes behind them
  and the time to build the fused ``Digraph``;
* a table for an RNN cell unrolled until the picture has about 200, 1,000 and 3,000 nodes:
  drawn nodes, the time ``make_dot`` takes to build the ``Digraph`` (best of 3) and the time
  Graphviz's ``dot`` takes to lay it out to SVG, in four modes: ``large_graph=False`` (Graphviz's
  defaults, the picture of torchviz and TorchOpt), the default (layout passes bounded by size;
  above ``LARGE_GRAPH_NODES`` nodes also shared tensors drawn beside each reader, nothing
  collapsed), ``large_graph=True`` (repeated steps collapsed, shared tensors drawn beside each
  reader) and ``large_graph=True, collapse_repeats=False`` (every step drawn: what the mode does
  for a loop whose steps differ). Drawn nodes count the copies of shared tensors. A layout that
  does not finish within the timeout is reported as ``> S s`` and killed.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import time
import warnings
from collections.abc import Callable

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import torch
import torch.nn.functional as F
from _results import add_markdown_option, write_markdown
from torch import nn

import torchopt_fn
from torchopt_fn.visual import make_dot
from torchopt_fn.visual._autograd import walk

# Drawn nodes per step of ``unrolled_rnn`` without the large-graph mode, and the fixed part.
RNN_NODES_PER_STEP = 10
RNN_FIXED_NODES = 9
MODES = {"large_graph=False": {"large_graph": False}, "default": {},
         "large_graph=True": {"large_graph": True},
         "  without collapse": {"large_graph": True, "collapse_repeats": False}}


def drawn_nodes(dot: object) -> int:
    return sum(1 for line in dot.body if "[label=" in line)


def best_time(fn: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def maml_node_counts(optimizer: str, steps: int) -> list[str]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    inner = getattr(torchopt_fn, optimizer)(net, lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    snapshots = [torchopt_fn.extract_state_dict(net, enable_visual=True, visual_prefix="step0.")]
    for step in range(1, steps + 1):
        inner.step(F.mse_loss(net(x), y))
        snapshots.append(torchopt_fn.extract_state_dict(net, enable_visual=True,
                                                        visual_prefix=f"step{step}."))
    outer = F.mse_loss(net(x), y)
    unfused = make_dot(outer, snapshots, fuse_optimizer=False, large_graph=False)
    fused = make_dot(outer, snapshots, large_graph=False)
    seconds = best_time(lambda: make_dot(outer, snapshots, large_graph=False))
    print(f"MAML, {steps} {optimizer} steps, MLP 4-16-1 (4 parameter tensors): "
          f"{len(walk([outer.grad_fn]))} autograd nodes; drawn nodes without fusion "
          f"{drawn_nodes(unfused)}, with fusion {drawn_nodes(fused)} "
          f"({drawn_nodes(unfused) / drawn_nodes(fused):.2f}x fewer); fused build "
          f"{seconds * 1e3:.0f} ms; unreached {fused.unreached}")
    return [f"MAML, {steps} {optimizer} steps, MLP 4-16-1", str(len(walk([outer.grad_fn]))),
            f"{drawn_nodes(unfused)} without fusion, {drawn_nodes(fused)} with fusion",
            f"{seconds * 1e3:.0f} ms (fused)", "-"]


def unrolled_rnn(steps: int) -> tuple[torch.Tensor, nn.RNNCell]:
    torch.manual_seed(0)
    cell = nn.RNNCell(8, 8)
    h = torch.zeros(1, 8)
    for x in torch.randn(steps, 1, 8):
        h = torch.tanh(cell(x, h) * 0.5 + 0.1) - 0.01
    return h, cell


def layout_seconds(source: str, timeout: float) -> float | None:
    """Seconds Graphviz's ``dot`` takes to lay ``source`` out to SVG; ``None`` after ``timeout``."""
    start = time.perf_counter()
    try:
        subprocess.run(["dot", "-Tsvg", "-o", "/dev/null"], input=source.encode(), check=True,
                       timeout=timeout, capture_output=True)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def rnn_table(sizes: list[int], timeout: float) -> list[list[str]]:
    print(f"\nRNN cell unrolled (8 features); layout = dot -Tsvg, killed after {timeout:.0f} s")
    print(f"{'target':>7} {'steps':>6} {'autograd':>9}  {'mode':<18} {'drawn':>6} "
          f"{'build':>8} {'layout':>9}")
    rows = []
    for size in sizes:
        steps = max(1, (size - RNN_FIXED_NODES) // RNN_NODES_PER_STEP)
        h, cell = unrolled_rnn(steps)
        params = dict(cell.named_parameters())
        autograd = len(walk([h.grad_fn]))
        for mode, options in MODES.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the default mode warns above 500 nodes
                dot = make_dot(h, params, **options)
                build = best_time(functools.partial(make_dot, h, params, **options))
            seconds = layout_seconds(dot.source, timeout)
            layout = f"> {timeout:.0f} s" if seconds is None else f"{seconds:.1f} s"
            print(f"{size:>7} {steps:>6} {autograd:>9}  {mode:<18} {drawn_nodes(dot):>6} "
                  f"{build * 1e3:>5.0f} ms {layout:>9}", flush=True)
            options_text = ", ".join(f"{k}={v}" for k, v in options.items()) or "default"
            rows.append([f"RNN cell, {steps} steps ({options_text})", str(autograd),
                         str(drawn_nodes(dot)), f"{build * 1e3:.0f} ms", layout])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 3000],
                        help="drawn nodes of the unrolled RNN without the large-graph mode")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds after which a Graphviz layout is killed")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (default: leave PyTorch's choice)")
    add_markdown_option(parser)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [maml_node_counts(optimizer, steps)
            for optimizer in ("MetaSGD", "MetaAdam") for steps in (2, 20)]
    rows += rnn_table(args.sizes, args.timeout)
    if args.markdown:
        write_markdown(args.markdown, ["graph", "autograd nodes", "drawn nodes",
                                       "make_dot build", "Graphviz layout to SVG"], rows)


if __name__ == "__main__":
    main()
