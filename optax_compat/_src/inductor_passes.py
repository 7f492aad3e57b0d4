"""An Inductor pass for the fused steps of :mod:`optax_compat._src.fused`.

Imported only when a fused step compiles with Inductor (importing Inductor takes seconds).
"""

from __future__ import annotations

import torch
from torch._inductor import custom_graph_pass


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
