"""Memory stays bounded over 500 outer MAML iterations with stop_gradient (TorchOpt issue #218)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_meta_training(iterations: int) -> dict[str, dict[str, int]]:
    output = subprocess.run([sys.executable, "-m", "tests.torchopt_fn.maml_memory",
                             str(iterations)], cwd=ROOT, check=True, capture_output=True,
                            text=True, timeout=300).stdout
    return json.loads(output.strip().splitlines()[-1])


def test_500_outer_iterations_do_not_grow_peak_memory():
    samples = run_meta_training(500)
    early, late = samples["50"], samples["500"]
    # one leaked iteration (graph of two inner steps, 128 hidden units, 64 shots) holds about
    # 0.5 MiB, so 450 leaked iterations would add ~200 MiB; allow 16 MiB of allocator noise.
    assert late["VmHWM"] - early["VmHWM"] < 16 * 1024, samples
    assert late["VmRSS"] - early["VmRSS"] < 16 * 1024, samples
