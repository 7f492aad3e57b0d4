"""Long MAML meta-training with ``stop_gradient``; prints the process's memory as JSON.

Run as ``python -m tests.torchopt_fn.maml_memory [iterations] [--no-stop-gradient]`` (the
test runs it in a fresh process, so that the peak resident set size is this loop's own).
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
    net = sine_net(torch.float32, hidden=128)
    generator = torch.Generator().manual_seed(0)
    outer = torchopt.Adam(net.parameters(), lr=1e-3)
    inner = torchopt.MetaSGD(net, lr=0.01, momentum=0.9)
    net_state = torchopt.extract_state_dict(net)
    inner_state = torchopt.extract_state_dict(inner)
    samples = {}
    for iteration in range(1, iterations + 1):
        outer.zero_grad()
        x_support, y_support, x_query, y_query = sine_task(generator, torch.float32, shots=64)
        for _ in range(2):
            inner.step(mse_loss(net(x_support), y_support))
        mse_loss(net(x_query), y_query).backward()
        torchopt.recover_state_dict(net, net_state)
        torchopt.recover_state_dict(inner, inner_state)
        outer.step()
        if stop_gradient:
            torchopt.stop_gradient(net)
            torchopt.stop_gradient(inner)
        if iteration in (50, iterations):
            samples[iteration] = memory_kib()
    print(json.dumps(samples))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500, "--no-stop-gradient" not in sys.argv)
