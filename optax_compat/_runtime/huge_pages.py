"""Packed CPU buffers on transparent huge pages, where Linux offers them.

A fused step streams its packed buffers (parameters, gradients, state) once per step. With
4 KiB pages each stream crosses a page every 1,024 float32 values, and on one core the page
walks cost about a tenth of the step: the compiled step of SGD with momentum over three 16 MB
buffers took 1.51-1.70 ms on huge pages against 1.69-2.15 ms without (torch.optim's fused
kernel over the same values in 100 tensors: 2.05-2.38 ms), and ``benchmarks/bench_all.py``'s
``TorchOptimizer(..., fused=True)`` went from 1.09x to 0.99x torch.optim's fused SGD at size
(a). :func:`cat`, :func:`zeros_like` and :func:`copy_of` ask the kernel
(``madvise(MADV_HUGEPAGE)``) to back the 2 MiB pages that lie wholly inside a new buffer with
huge pages; ``torch.empty``'s memory is not yet touched, so they are mapped at the first write.
It is advice: where the system has no transparent huge pages, no ``madvise``, another device
or a tensor subclass, the buffer is what the plain torch function gives and nothing else
changes. No memory is added: a buffer's ends that do not fill a 2 MiB page keep 4 KiB pages.

PyTorch's own switch (``THP_MEM_ALLOC_ENABLE=1``) does this for every large CPU tensor, but it
is read once at start-up, from the environment.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable, Sequence

import torch

HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14  # linux/mman.h


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise``, on Linux; ``None`` elsewhere or where it cannot be loaded."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise  # the process's libc
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def _advisable(tensor: torch.Tensor) -> bool:
    """Whether new memory like ``tensor``'s may be advised: a plain CPU tensor, on Linux."""
    return (type(tensor) is torch.Tensor and tensor.device.type == "cpu"
            and _madvise() is not None)


def _advised_empty(numel: int, like: torch.Tensor) -> torch.Tensor:
    """An untouched 1-D buffer of ``numel`` elements of ``like``'s dtype on the CPU, the 2 MiB
    pages wholly inside it advised onto huge pages (best effort: the result is not checked,
    the buffer is correct either way)."""
    buffer = torch.empty(numel, dtype=like.dtype, device=like.device)
    start = buffer.data_ptr()
    first = -(-start // HUGE_PAGE) * HUGE_PAGE
    last = (start + buffer.numel() * buffer.itemsize) // HUGE_PAGE * HUGE_PAGE
    if start and last > first:
        _madvise()(first, last - first, _MADV_HUGEPAGE)
    return buffer


def cat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.cat`` of 1-D ``tensors``, into a new buffer on huge pages where it can be."""
    if not _advisable(tensors[0]):
        return torch.cat(tensors)
    return torch.cat(tensors, out=_advised_empty(sum(t.numel() for t in tensors), tensors[0]))


def zeros_like(tensor: torch.Tensor) -> torch.Tensor:
    """``torch.zeros_like(tensor)`` (contiguous), on huge pages where it can be."""
    if not _advisable(tensor):
        return torch.zeros_like(tensor, memory_format=torch.contiguous_format)
    return _advised_empty(tensor.numel(), tensor).view(tensor.shape).zero_()


def copy_of(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``tensor`` in memory of its own, on huge pages where it can be."""
    if not _advisable(tensor):
        return tensor.clone(memory_format=torch.contiguous_format)
    return _advised_empty(tensor.numel(), tensor).view(tensor.shape).copy_(tensor)
