"""When one of PyTorch's fused optimizer kernels can run a step.

``torch._fused_adam_``/``_fused_adamw_`` (the Adam engine's ``"kernel"`` path) and
``torch._fused_sgd_`` (SGD's whole in-place step) do a whole step in one pass per tensor. They
take lists of plain dense tensors, all on the CPU or all on CUDA; in float32 and float64 they
compute in the tensors' own precision (in float16 and bfloat16 they would compute in float32,
off Optax's roundings); they read their inputs as packed memory and write their buffers in
place; they run eagerly, outside ``torch.compile``'s tracing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from optax_compat._runtime import tree_math as tm

__all__ = ["KERNEL_DTYPES", "takes"]

#: The dtypes a kernel computes in without changing Optax's numbers.
KERNEL_DTYPES = (torch.float32, torch.float64)


def takes(gs: tm.Leaves, packed: Sequence[tm.Leaves] = ()) -> bool:
    """Whether the kernels take a step over the gradients ``gs`` (of one dtype, checked by the
    caller with the other inputs').

    ``gs`` must be plain strided tensors (a DTensor would meet the kernels' plain-tensor
    scalars), all on the CPU or all on CUDA, in :data:`KERNEL_DTYPES`, outside
    ``torch.compile``'s tracing; the lists of ``packed``, the tensors the step reads as packed
    memory or writes in place, must be contiguous.
    """
    return (gs[0].dtype in KERNEL_DTYPES and not torch.compiler.is_compiling()
            and set(map(type, gs)) == {torch.Tensor}
            and set(tm.attributes("layout", gs)) == {torch.strided}
            and (all(tm.attributes("is_cpu", gs)) or all(tm.attributes("is_cuda", gs)))
            and all(map(torch.Tensor.is_contiguous, itertools.chain.from_iterable(packed))))
