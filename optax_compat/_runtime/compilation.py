"""``torch.compile`` options that make Inductor's CPU code follow ATen's CPU capability.

Inductor chooses the vector ISA of the C++ it generates (``cpp.simdlen``) from the
``ATEN_CPU_CAPABILITY`` environment variable when ``cpp.simdlen`` is unset, but its FX-graph
cache key holds the Inductor config, not that variable. A graph compiled under ``avx2`` is then
reused under ``ATEN_CPU_CAPABILITY=default``, and its vectorised source is rebuilt without the
vector headers (``'at::vec' has not been declared``). Passing ``cpp.simdlen`` explicitly, from
the capability ATen runs with, makes the choice part of the cache key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# Vector width in bits of each capability ``torch.backends.cpu.get_cpu_capability`` reports;
# 0 selects Inductor's scalar code.
_SIMD_BITS = {"DEFAULT": 0, "NO AVX": 0, "AVX2": 256, "AVX512": 512, "VSX": 256,
              "Z VECTOR": 256, "NEON": 128, "SVE128": 128, "SVE256": 256}


def compile_options(backend: str | Callable[..., Any] = "inductor") -> dict[str, Any] | None:
    """The ``options`` for ``torch.compile(..., backend=backend)``: Inductor's ISA = ATen's.

    For the ``"inductor"`` backend, ``cpp.simdlen`` is set to the vector width of
    ``torch.backends.cpu.get_cpu_capability()``, so compiled CPU code uses the same ISA as ATen's
    kernels and cached graphs are never shared between capabilities. Other backends take no
    options (``None``); so does a capability this table does not know, leaving Inductor's choice.

    Example:
      >>> import torch
      >>> from optax_compat._runtime.compilation import compile_options
      >>> step = torch.compile(torch.neg, options=compile_options())
      >>> compile_options("eager") is None
      True
    """
    if backend != "inductor":
        return None
    bits = _SIMD_BITS.get(torch.backends.cpu.get_cpu_capability())
    return None if bits is None else {"cpp.simdlen": bits}
