"""Hypothesis profiles: deterministic in CI, exploratory on demand.

``ci`` (the default) draws the same examples on every run, keeps no example database and
has no deadline (timings on shared CI machines are noise). ``long`` explores: fresh random
examples on every run, remembered failures (the local example database) and many more
examples for tests that do not pin ``max_examples``. Select it with
``python -m pytest --hypothesis-profile=long tests``.
"""

import atexit
import shutil
import tempfile
import zlib

import jax
import pytest
import torch
from hypothesis import settings

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


@pytest.fixture(autouse=True)
def _torch_seeded_by_test_id(request: pytest.FixtureRequest) -> None:
    """Seeds torch's global generator from the test's id, so that a test draws the same data
    whichever tests ran before it in its worker (``pytest -n`` deals them out differently as
    the suite grows)."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
