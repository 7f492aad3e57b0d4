"""An Inductor pass for the fused steps of :mod:`optax_compat._src.fused`.

Imported only when a fused step compiles with Inductor (importing Inductor takes seconds).
"""

from __future__ import annotations

import torch
from torch._inductor import custom_graph_pass


@torch.library.custom_op("optax_compat::computed_scalar", mutates_args=())
def computed_scalar(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x``; Inductor computes ``x`` before the kernels that read the copy (see
    :class:`HoistScalars`)."""
    return x.clone()


@computed_scalar.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class HoistScalars(custom_graph_pass.CustomGraphPass):
    """A post-grad pass: scalars computed from scalars are computed once per step.

    Inductor inlines a small computation (Adam's bias corrections ``1 - b ** t``, a learning
    rate schedule; under ``vmap``, a per-leaf trust ratio or Adafactor's per-row factor) into
    every kernel that reads it, and its C++ kernels evaluate it at every vector of the loop:
    ``-fmath-errno`` keeps GCC from hoisting ``pow`` or ``sqrt`` out of the loop, which then
    costs more than the memory traffic. Routing each such value through the opaque
    :func:`computed_scalar` makes Inductor compute it into a small buffer first.

    A "scalar" here is a value computed from values no larger than itself, read by an op with
    more elements (a 0-d tensor read by a vector, a per-row factor read by a matrix). Computing
    it once also rounds it once, to its dtype, as the eager step does (inlined, a float32
    scalar computed from float64 ones may keep float64's precision).
    """

    def __call__(self, graph: torch.fx.Graph) -> None:
        """Inserts :func:`computed_scalar` between computed scalars and their broadcast
        readers."""
        for node in list(graph.nodes):
            size = _numel(node)
            if node.op != "call_function" or size is None or not all(
                    (_numel(x) or 0) <= size for x in node.all_input_nodes):
                continue
            if size > 1 and _is_view(node):
                continue  # its input is hoisted instead, if that is computed
            readers = [user for user in node.users if _reads_broadcast(user, size)]
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
        return "optax_compat.HoistScalars.6"


_VIEWS = frozenset({"reshape", "view", "unsqueeze", "squeeze", "permute", "expand", "slice",
                    "select", "alias", "unbind", "as_strided", "t", "transpose", "getitem"})


def _reads_broadcast(user: torch.fx.Node, size: int) -> bool:
    """Whether ``user`` reads a value of ``size`` elements into more elements, itself or (a
    view of the value, such as one part of an ``unbind``) through its own readers."""
    numel = _largest_numel(user)
    if numel is not None and numel > size:
        return True
    return _is_view(user) and any(_reads_broadcast(reader, size) for reader in user.users)


def _is_view(node: torch.fx.Node) -> bool:
    """Whether ``node`` only reshapes or indexes another value (it computes nothing)."""
    name = getattr(node.target, "__name__", str(node.target))
    return name.split(".")[0] in _VIEWS


def _numel(node: torch.fx.Node) -> int | None:
    """The number of elements ``node`` computes, if it is one tensor of static shape."""
    value = node.meta.get("val")
    return _static_numel(value) if isinstance(value, torch.Tensor) else None


def _largest_numel(node: torch.fx.Node) -> int | None:
    """The elements of ``node``'s largest output: one tensor, or a list of them (a
    ``torch._foreach_*`` op over the flat buffers), if all are of static shape."""
    value = node.meta.get("val")
    outputs = value if isinstance(value, (list, tuple)) else [value]
    sizes = [_static_numel(x) if isinstance(x, torch.Tensor) else None for x in outputs]
    return max(sizes) if sizes and None not in sizes else None


def _static_numel(value: torch.Tensor) -> int | None:
    try:
        return int(value.numel())
    except (TypeError, RuntimeError):  # a symbolic size
        return None
