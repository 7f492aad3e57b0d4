"""Hypothesis profiles, the test device, and the guard that keeps tests from leaking global state.

Hypothesis profiles: deterministic in CI, exploratory on demand.

``ci`` (the default) draws the same examples on every run, keeps no example database and
has no deadline (timings on shared CI machines are noise). ``long`` explores: fresh random
examples on every run, remembered failures (the local example database) and many more
examples for tests that do not pin ``max_examples``. Select it with
``python -m pytest --hypothesis-profile=long tests``.

The device: tests take it from the ``device`` fixture, which reads
``OPTAX_COMPAT_TEST_DEVICE`` (default ``cpu``); on another device every test also runs inside
``torch.device(...)``, so that tensors a test builds without naming a device land there too.

Isolation: every test runs under :func:`_global_state_unchanged`, which fails the test that
leaves process-global state changed (torch's defaults and configs, Dynamo's and Inductor's
configs, JAX's and our own 64-bit switch, environment variables) and restores what it can, so
that the suite passes in any order (``pytest-randomly``) and with any ``-n``.
"""

import atexit
import os
import shutil
import sys
import tempfile
import zlib
from collections.abc import Iterator

import jax
import pytest
import torch
from hypothesis import settings

import optax_compat

# JAX compiles each ``lax.cond`` of Optax's combinators (``apply_if_finite``, ``MultiSteps``,
# ``lookahead``...) anew at every eager call. A compilation cache, keyed on the computation,
# lets identical ones (a program's later steps in the differential fuzzer) reuse their
# executable; one temporary directory per test process, removed at exit.
_JAX_CACHE = tempfile.mkdtemp(prefix="jax-compilation-cache-")
atexit.register(shutil.rmtree, _JAX_CACHE, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _JAX_CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.register_profile("long", derandomize=False, deadline=None, max_examples=1000)
settings.load_profile("ci")


TEST_DEVICE = torch.device(os.environ.get("OPTAX_COMPAT_TEST_DEVICE", "cpu"))
# The absolute tolerance of float32 comparisons between two ways of computing a few steps on
# the test device. CUDA's kernels (torch's foreach and fused ones, Triton's) contract products
# and sums into FMAs and sum in another order than the CPU's: measured on an H200 (torch
# 2.11), up to 2.3e-6 on parameters of order 0.1 after three Adam steps.
FLOAT32_ATOL = 5e-6 if TEST_DEVICE.type == "cuda" else 1e-6

# Under ``pytest -n N`` each worker gets its share of the cores for torch's intra-op threads:
# torch's default (a thread per core in every worker) oversubscribes the CPU, and its threads
# then wait on each other.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))


@pytest.fixture(autouse=True)
def _torch_seeded_by_test_id(request: pytest.FixtureRequest) -> Iterator[None]:
    """Seeds torch's global generator from the test's id, so that a test draws the same data
    whichever tests ran before it in its worker (``pytest -n`` deals them out differently as
    the suite grows), and gives the generator back as it found it afterwards."""
    devices = [TEST_DEVICE] if TEST_DEVICE.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
        yield


@pytest.fixture
def fused_sgd_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of PyTorch's fused SGD kernel (``torch._fused_sgd_``, which still runs)
    during the test: one entry a call."""
    calls, kernel = [], torch._fused_sgd_

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(torch, "_fused_sgd_", counted)
    return calls


@pytest.fixture
def device() -> torch.device:
    """The device tests build their tensors on (``OPTAX_COMPAT_TEST_DEVICE``, default cpu)."""
    return TEST_DEVICE


@pytest.fixture(autouse=True)
def _tensors_on_the_test_device():
    """On a device other than the CPU, a test's factory calls that name no device use it."""
    if TEST_DEVICE.type == "cpu":
        yield
        return
    with torch.device(TEST_DEVICE):
        yield


def _torch_configs() -> dict[str, dict]:
    """The config modules of torch that tests may patch and that are already imported
    (importing Inductor just to look at it would cost seconds per worker)."""
    names = ("torch._dynamo.config", "torch._inductor.config", "torch._functorch.config",
             "torch.compiler.config")
    return {name: sys.modules[name].get_config_copy() for name in names if name in sys.modules}


# Variables that pytest or torch itself set, once, on first use (Inductor's default cache folder;
# on CUDA, Triton's cache folder and ptxas, set by Inductor's first Triton compilation).
_OWN_ENVIRONMENT = frozenset({"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR",
                              "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", "TRITON_CACHE_DIR",
                              "TRITON_PTXAS_PATH"})


def _global_state() -> dict[str, object]:
    return {
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.get_default_device()": torch.get_default_device(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.are_deterministic_algorithms_enabled()":
            torch.are_deterministic_algorithms_enabled(),
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled(),
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch function modes": torch._C._len_torch_function_stack(),
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
        "optax_compat.config.jax_enable_x64": optax_compat.config.jax_enable_x64,
        "os.environ": {k: v for k, v in os.environ.items() if k not in _OWN_ENVIRONMENT},
        "os.getcwd()": os.getcwd(),
        **_torch_configs(),
    }


def _restore(name: str, value: object) -> None:
    setters = {
        "torch.get_default_dtype()": torch.set_default_dtype,
        "torch.get_default_device()": torch.set_default_device,
        "torch.is_grad_enabled()": torch.set_grad_enabled,
        "torch.are_deterministic_algorithms_enabled()": torch.use_deterministic_algorithms,
        "torch.is_anomaly_enabled()": torch.autograd.set_detect_anomaly,
        "torch.get_num_threads()": torch.set_num_threads,
        "torch.get_float32_matmul_precision()": torch.set_float32_matmul_precision,
        "jax_enable_x64": lambda v: jax.config.update("jax_enable_x64", v),
        "optax_compat.config.jax_enable_x64":
            lambda v: optax_compat.config.update("jax_enable_x64", v),
        "os.getcwd()": os.chdir,
    }
    if name in setters:
        setters[name](value)
    elif name == "os.environ":
        for key in set(os.environ) - set(value) - _OWN_ENVIRONMENT:
            del os.environ[key]
        os.environ.update(value)
    elif name in sys.modules and isinstance(value, dict):
        sys.modules[name].load_config(value)


@pytest.fixture(autouse=True)
def _global_state_unchanged(request: pytest.FixtureRequest):
    """Fails a test that leaves process-global state changed, after restoring it.

    Warning filters are not compared: pytest itself restores them after every test.
    """
    before = _global_state()
    yield
    after = _global_state()
    changed = []
    for name, value in before.items():
        if after.get(name) == value:
            continue
        if isinstance(value, dict) and name in after:
            keys = sorted(k for k in value.keys() | after[name].keys()
                          if value.get(k, "<absent>") != after[name].get(k, "<absent>"))
            changed.append(f"{name}: {keys}")
        else:
            changed.append(f"{name}: {value!r} -> {after.get(name)!r}")
        _restore(name, value)
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None and not hasattr(inductor, "force_disable_caches"):
        changed.append("torch._inductor.config lost its alias force_disable_caches")
    if changed:
        pytest.fail(f"{request.node.nodeid} left global state changed: " + "; ".join(changed),
                    pytrace=False)
