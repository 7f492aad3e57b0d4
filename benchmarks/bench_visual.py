"""Measures torchopt_fn.visual: node counts with and without fusion, and build/layout times.

Run: ``python benchmarks/bench_visual.py`` (add ``--layout`` to also time Graphviz's layout of a
feed-forward graph of about 1,000 nodes and of a short unrolled RNN).

Prints
* the number of drawn nodes for MAML inner loops (``MetaSGD`` and ``MetaAdam``, 2 and 20 steps)
  on a small MLP, with and without optimizer fusion, the number of autograd nodes behind them
  and the time to build the fused ``Digraph``;
* the time to build the ``Digraph`` (no layout) for an RNN cell unrolled 2,000 steps
  (> 20,000 autograd nodes), best of 3.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _results import add_markdown_option, write_markdown
from torch import nn

import torchopt_fn
from torchopt_fn.visual import make_dot
from torchopt_fn.visual._autograd import walk


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
    unfused = make_dot(outer, snapshots, fuse_optimizer=False)
    fused = make_dot(outer, snapshots)
    seconds = best_time(lambda: make_dot(outer, snapshots))
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


def rnn_build_time() -> list[str]:
    h, cell = unrolled_rnn(2000)
    nodes = len(walk([h.grad_fn]))
    params = dict(cell.named_parameters())
    seconds = best_time(lambda: make_dot(h, params))
    print(f"RNN cell unrolled 2,000 steps ({nodes} autograd nodes): make_dot builds the "
          f"Digraph in {seconds:.2f} s (best of 3, no layout)")
    return ["RNN cell unrolled 2,000 steps", str(nodes), "-", f"{seconds * 1e3:.0f} ms", "-"]


def layout_time() -> list[list[str]]:
    # Layout cost depends on shape more than size: a weight shared by every step of an unrolled
    # loop gives long edges across all ranks, which Graphviz's dot handles super-linearly.
    torch.manual_seed(0)
    deep = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(150)])
    feed_forward = make_dot(deep(torch.randn(2, 8)).sum(), deep.named_parameters())
    h, cell = unrolled_rnn(20)
    recurrent = make_dot(h, dict(cell.named_parameters()))
    rows = []
    for what, dot in (("MLP, 150 layers", feed_forward), ("RNN cell, 20 steps", recurrent)):
        seconds = best_time(lambda dot=dot: dot.pipe(format="svg"), repeats=1)
        print(f"Graphviz layout to SVG, {what} ({drawn_nodes(dot)} drawn nodes): {seconds:.1f} s")
        rows.append([what, "-", str(drawn_nodes(dot)), "-", f"{seconds:.1f} s"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", action="store_true", help="also time Graphviz's layout")
    add_markdown_option(parser)
    args = parser.parse_args()
    rows = [maml_node_counts(optimizer, steps)
            for optimizer in ("MetaSGD", "MetaAdam") for steps in (2, 20)]
    rows.append(rnn_build_time())
    if args.layout:
        rows += layout_time()
    if args.markdown:
        write_markdown(args.markdown, ["graph", "autograd nodes", "drawn nodes",
                                       "make_dot build", "Graphviz layout to SVG"], rows)


if __name__ == "__main__":
    main()
