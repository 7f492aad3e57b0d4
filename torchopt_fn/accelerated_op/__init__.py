"""Which fast path Adam runs on (``torchopt.accelerated_op``).

TorchOpt 0.7.3 ships its own compiled Adam kernel, used with ``use_accelerated_op=True``. Here
that flag selects PyTorch's fused Adam/AdamW kernel (``torch._fused_adam_``/``_fused_adamw_``,
through ``optax_compat``'s Adam engine) for the in-place steps of :class:`torchopt_fn.Adam` and
:class:`torchopt_fn.AdamW`, and TorchOpt's backward (0 where the first moment is 0) for
differentiable ones. Every other step, and every differentiable one, runs on the
multi-tensor ``torch._foreach_*`` kernels of :mod:`optax_compat`. :func:`is_available` tells
whether the accelerated path runs on the given devices; :func:`.fast_path` names its kernels.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from optax_compat._runtime import adam_engine
from torchopt_fn.accelerated_op.adam_op import AdamOp
from torchopt_fn.typing import Device

__all__ = ["AdamOp", "is_available", "fast_path"]


def _as_device(device: Device) -> torch.device:
    # ``torch.device(0)`` asks for the current accelerator, which fails where there is none.
    return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)


def _as_devices(devices: Device | Iterable[Device] | None) -> list[torch.device]:
    if devices is None:
        return [torch.device("cuda"), torch.device("cpu")]
    if isinstance(devices, (torch.device, str, int)):
        return [_as_device(devices)]
    return [_as_device(d) for d in devices]


def _present(device: torch.device) -> bool:
    """Whether tensors can be created on ``device`` (CUDA needs a GPU)."""
    if device.type == "cuda" and not torch.cuda.is_available():
        return False
    try:
        torch.empty(0, device=device)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def _fused_adam_runs_on(device: torch.device) -> bool:
    """Whether one fused Adam step on a small tensor succeeds on ``device``."""
    if not _present(device):
        return False
    ones = [torch.ones(2, device=device) for _ in range(4)]
    try:
        adam_engine.step("kernel", adam_engine.AdamHyperParams(),
                         torch.ones([], dtype=torch.int32, device=device), ones[:1], ones[1:2],
                         ones[2:3], "apply", adam_engine.AliasTerms(1e-3), ones[3:], 1e-3)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def is_available(devices: Device | Iterable[Device] | None = None) -> bool:
    """Whether ``use_accelerated_op=True`` runs on every one of ``devices``, as in TorchOpt.

    The accelerated path runs wherever tensors can be created: on PyTorch's fused Adam kernel
    where it exists, else on the multi-tensor kernels (see :func:`.fast_path`). As TorchOpt's
    (whose compiled kernel is absent here), the answer is ``False`` only for CUDA without a GPU.

    Args:
      devices: a device or devices to check; ``None`` checks CUDA and the CPU.

    Returns:
      ``True`` if every device is usable.
    """
    return all(_present(device) for device in _as_devices(devices))


def fast_path(device: Device | None = None) -> str:
    """The kernels an in-place Adam step with ``use_accelerated_op=True`` runs on.

    Args:
      device: the device of the parameters (default: CPU).

    Returns:
      ``"fused"`` (PyTorch's fused Adam kernel) where it runs, else ``"foreach"``
      (multi-tensor kernels, also the path of every differentiable step).
    """
    return "fused" if _fused_adam_runs_on(torch.device("cpu" if device is None else device)) \
        else "foreach"
