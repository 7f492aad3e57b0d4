"""Distributed leaves: ``torch.distributed.tensor.DTensor`` shards (FSDP2), and the flat
vector of all leaves (:func:`ravel`, :func:`unravel`), which gathers and re-shards them.

Telling DTensor leaves apart, gathering one whole, carrying out pending reductions before a
state keeps them. Nothing here imports ``torch.distributed`` (it is read from ``sys.modules``
only once loaded).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import torch

from optax_compat._runtime.tree_math.trees import Leaves


def is_distributed(xs: Sequence[Any]) -> bool:
    """Whether any of ``xs`` is a ``torch.distributed.tensor.DTensor`` (e.g. an FSDP2 shard).

    Such leaves take the registered DTensor operators where a ``torch._foreach_*`` kernel has
    no sharding strategy; plain tensors keep the batched kernels. Costs nothing when
    ``torch.distributed.tensor`` was never imported (then no DTensor can exist).
    """
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and any(isinstance(x, module.DTensor) for x in xs)


def gathered(x: torch.Tensor) -> torch.Tensor:
    """The whole value of a DTensor as a plain tensor on every rank (a plain tensor as it is).

    For a replicated 0-d DTensor (a global norm, an inner product) nothing is communicated.
    """
    full_tensor = getattr(x, "full_tensor", None)
    return full_tensor() if full_tensor is not None else x


def reduced_for_storage(xs: Leaves) -> Leaves:
    """The leaves with every pending DTensor reduction carried out, for keeping in a state.

    A reduction over a sharded axis (the column means of a matrix sharded by rows) gives a
    DTensor with a ``Partial`` placement: each rank holds a whole-size partial result. Stored
    as it is, a state would keep the whole vector on every rank; reduce-scattered to
    ``Shard(0)`` (``Replicate`` for 0-d values), each rank keeps its part and the next step
    gathers it where the math needs the whole. Plain tensors are returned as they are.
    """
    if not is_distributed(xs):
        return list(xs)
    module = sys.modules["torch.distributed.tensor"]
    partial = sys.modules["torch.distributed.tensor.placement_types"].Partial
    result = []
    for x in xs:
        if isinstance(x, module.DTensor) and any(isinstance(p, partial) for p in x.placements):
            whole = module.Shard(0) if x.ndim else module.Replicate()
            x = x.redistribute(placements=[whole if isinstance(p, partial) else p
                                           for p in x.placements])
        result.append(x)
    return result


def ravel(xs: Leaves) -> torch.Tensor:
    """All leaves concatenated into one flat vector in their promoted dtype.

    The vector of JAX's ``flatten_util.ravel_pytree``, in the leaves' flattening order;
    :func:`unravel` is its inverse. DTensor leaves are gathered whole (``full_tensor``) on every
    rank: a vector of all parameters is what the callers' math (projections that sort it,
    dense Hessians) works on, and DTensor cannot flatten an unevenly sharded leaf.
    """
    if not xs:
        return torch.zeros(0)
    dtype = xs[0].dtype
    for x in xs[1:]:
        dtype = torch.promote_types(dtype, x.dtype)
    if is_distributed(xs):
        xs = [gathered(x) for x in xs]
    return torch.cat([x.reshape(-1).to(dtype) for x in xs])


def unravel(vector: torch.Tensor, like: Leaves) -> Leaves:
    """Splits a flat ``vector`` into leaves shaped and typed like ``like`` (undoes :func:`ravel`).

    Raises:
      ValueError: if ``vector`` is not 1-D with as many elements as the leaves together.
    """
    sizes = [x.numel() for x in like]
    if vector.ndim != 1 or vector.shape[0] != sum(sizes):
        raise ValueError(f"Expected a vector of {sum(sizes)} elements, got shape "
                         f"{tuple(vector.shape)}.")
    pieces = [piece.reshape(x.shape).to(x.dtype)
              for piece, x in zip(torch.split(vector, sizes), like)]
    if not is_distributed(like):
        return pieces
    # Each rank keeps its own shard of the whole value it holds: no communication.
    distribute = sys.modules["torch.distributed.tensor"].distribute_tensor
    return [distribute(piece, x.device_mesh, x.placements, src_data_rank=None)
            if hasattr(x, "device_mesh") else piece for piece, x in zip(pieces, like)]
