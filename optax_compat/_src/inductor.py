"""Inductor settings every ``torch.compile`` of this package uses.

Inductor picks the vector ISA of its C++ kernels from ``ATEN_CPU_CAPABILITY`` (``default``
means none), but its FX-graph cache key does not include that variable: a kernel generated
with AVX2 in one process is reused by a process running under ``ATEN_CPU_CAPABILITY=default``,
whose compile flags do not declare ``at::vec``, and the C++ compilation fails
(``'at::vec' has not been declared``). Setting ``cpp.simdlen`` to the width of the ISA this
process runs with puts the ISA into the cache key (the key includes Inductor's config) and
makes Inductor pick that same ISA.
"""

from __future__ import annotations

from typing import Any

import torch

# ATen's CPU capabilities (``torch.backends.cpu.get_cpu_capability()``) with the vector width
# Inductor gives the same ISA; a width no ISA has (1) means no vectorization.
_SIMDLEN = {"DEFAULT": 1, "AVX2": 256, "AVX512": 512}


def inductor_options() -> dict[str, Any]:
    """Inductor config for ``torch.compile(..., options=...)`` or ``config.patch(...)``.

    Returns:
      ``{"cpp.simdlen": n}`` with the vector width of the ISA ATen runs with in this process,
      or ``{}`` on CPUs where Inductor's own choice already follows it.
    """
    simdlen = _SIMDLEN.get(torch.backends.cpu.get_cpu_capability())
    return {} if simdlen is None else {"cpp.simdlen": simdlen}

