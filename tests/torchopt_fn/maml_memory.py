"""Long meta-training with a MetaAdam inner loop; prints the process's memory as JSON.

Each outer iteration takes two differentiable MetaAdam steps on the network (the network and
the optimizer state carry over between iterations, as in TorchOpt issue #218), back-propagates
a query loss to a meta-parameter (a learned input scale), steps the outer optimizer and cuts the
graph with ``stop_gradient``. Run as ``python -m tests.torchopt_fn.maml_memory [iterations]``;
``--no-stop-gradient`` runs the inner loop alone without cutting the graph (the leak of #218),
to show what an unbounded graph costs. The test runs it in a fresh process, so that the peak
resident set size is the loop's own.
"""

from __future__ import annotations

import json
import sys

import torch
from torch.nn.functional import mse_loss

import torchopt_fn as torchopt
from tests.torchopt_fn.models import sine_net, sine_task


def memory_kib() -> dict[str, int]:
    """Current (``VmRSS``) and peak (``VmHWM``) resident set size of this process, in KiB."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def main(iterations: int, stop_gradient: bool) -> None:
    torch.set_num_threads(1)
    net = sine_net(torch.float32, hidden=64)
    input_scale = torch.ones(1, requires_grad=True)
    generator = torch.Generator().manual_seed(0)
    outer = torchopt.Adam([input_scale], lr=1e-3)
    inner = torchopt.MetaAdam(net, lr=1e-3)
    samples = {}
    for iteration in range(1, iterations + 1):
        x_support, y_support, x_query, y_query = sine_task(generator, torch.float32, shots=32)
        for _ in range(2):
            inner.step(mse_loss(net(x_support * input_scale), y_support))
        if stop_gradient:
            outer.zero_grad()
            mse_loss(net(x_query * input_scale), y_query).backward()
            outer.step()
            torchopt.stop_gradient(net)
            torchopt.stop_gradient(inner)
        if iteration in (50, iterations):
            samples[iteration] = memory_kib()
    print(json.dumps(samples))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500, "--no-stop-gradient" not in sys.argv)
