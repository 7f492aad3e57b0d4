"""Which fast path the Adam family runs on (``torchopt.accelerated_op``).

TorchOpt 0.7.3 ships a compiled Adam kernel. Here there is no extension to build: the
``optax_compat`` transformations run every step on ``torch._foreach_*`` multi-tensor kernels
(one kernel launch per operation for all parameters), which is the accelerated path.
:func:`is_available` checks that this path runs on the requested devices, and
:func:`fast_path` names it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from torchopt_fn.typing import Device

__all__ = ["is_available", "fast_path"]


def _as_devices(devices: Device | Iterable[Device] | None) -> list[torch.device]:
    if devices is None:
        return [torch.device("cpu")] + (
            [torch.device("cuda")] if torch.cuda.is_available() else [])
    if isinstance(devices, (torch.device, str, int)):
        return [torch.device(devices)]
    return [torch.device(d) for d in devices]


def fast_path(device: Device | None = None) -> str:
    """The name of the kernels Adam's update runs on for ``device`` (default: CPU).

    Returns:
      ``"foreach"`` (multi-tensor ``torch._foreach_*`` kernels) where they are available,
      else ``"per-tensor"``.
    """
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return "per-tensor"
    return "foreach" if is_available(device) else "per-tensor"


def is_available(devices: Device | Iterable[Device] | None = None) -> bool:
    """Whether the accelerated (multi-tensor) Adam path runs on every one of ``devices``.

    Args:
      devices: a device or devices to check; ``None`` checks the CPU and, if present, CUDA.

    Returns:
      ``True`` if a small Adam step on foreach kernels succeeds on every device.
    """
    from torchopt_fn.transform import scale_by_accelerated_adam

    try:
        for device in _as_devices(devices):
            if device.type == "cuda" and not torch.cuda.is_available():
                return False
            params = [torch.ones(2, device=device)]
            tx = scale_by_accelerated_adam()
            tx.update([torch.ones(2, device=device)], tx.init(params), params=params)
    except (RuntimeError, NotImplementedError):
        return False
    return True
