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
from torch._inductor import custom_graph_pass

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


@torch.library.custom_op("optax_compat::computed_scalar", mutates_args=())
def computed_scalar(x: torch.Tensor) -> torch.Tensor:
    """A copy of the 0-d tensor ``x``; Inductor computes ``x`` before the kernels that read
    the copy (see :class:`HoistScalars`)."""
    return x.clone()


@computed_scalar.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class HoistScalars(custom_graph_pass.CustomGraphPass):
    """A post-grad pass: scalars computed from scalars are computed once per step.

    Inductor inlines a 0-d computation (Adam's bias corrections ``1 - b ** t``, a learning
    rate schedule) into every kernel that reads it, and its C++ kernels evaluate it at every
    vector of the loop: ``-fmath-errno`` keeps GCC from hoisting ``pow`` or ``sqrt`` out of
    the loop, which then costs more than the memory traffic. Routing each such scalar through
    the opaque :func:`computed_scalar` makes Inductor compute it into a 0-d buffer first.
    """

    def __call__(self, graph: torch.fx.Graph) -> None:
        """Inserts :func:`computed_scalar` between computed scalars and non-scalar readers."""
        for node in list(graph.nodes):
            if node.op != "call_function" or not _is_scalar(node) or not all(
                    map(_is_scalar, node.all_input_nodes)):
                continue
            readers = [user for user in node.users if not _is_scalar(user)]
            if not readers:
                continue
            with graph.inserting_after(node):
                hoisted = graph.call_function(torch.ops.optax_compat.computed_scalar.default,
                                              (node,))
            hoisted.meta["val"] = node.meta["val"]
            for reader in readers:
                reader.replace_input_with(node, hoisted)

    def uuid(self) -> str:
        """The pass's identity in Inductor's cache keys."""
        return "optax_compat.HoistScalars.1"


def _is_scalar(node: torch.fx.Node) -> bool:
    """Whether ``node`` computes a 0-d tensor."""
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.dim() == 0
