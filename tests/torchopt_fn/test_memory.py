"""Memory stays bounded over 500 outer meta-iterations with stop_gradient (TorchOpt issue #218)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
MIB = 1024  # the figures are in KiB


def run_meta_training(*args: str) -> dict[str, dict[str, int]]:
    output = subprocess.run([sys.executable, "-m", "tests.torchopt_fn.maml_memory", *args],
                            cwd=ROOT, check=True, capture_output=True, text=True,
                            timeout=300).stdout
    return json.loads(output.strip().splitlines()[-1])


def test_500_outer_iterations_with_stop_gradient_do_not_grow_peak_memory():
    samples = run_meta_training("500")
    early, late = samples["50"], samples["500"]
    assert late["VmHWM"] - early["VmHWM"] < 8 * MIB, samples  # measured: ~0.25 MiB
    assert late["VmRSS"] - early["VmRSS"] < 8 * MIB, samples


def test_the_measurement_sees_an_unbounded_graph():
    # The same inner loop without stop_gradient keeps every step's graph alive (#218):
    # about 0.75 MiB per iteration here, so 70 more iterations add ~50 MiB.
    samples = run_meta_training("120", "--no-stop-gradient")
    assert samples["120"]["VmHWM"] - samples["50"]["VmHWM"] > 20 * MIB, samples
