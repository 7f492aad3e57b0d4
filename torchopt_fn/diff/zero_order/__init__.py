"""Zero-order gradient estimation: :func:`zero_order` and :class:`ZeroOrderGradientModule`.

As in TorchOpt, the module itself is callable: ``torchopt_fn.diff.zero_order(...)`` is
``torchopt_fn.diff.zero_order.zero_order(...)``.
"""

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from torchopt_fn.diff.zero_order import nn
from torchopt_fn.diff.zero_order.decorator import zero_order
from torchopt_fn.diff.zero_order.nn import ZeroOrderGradientModule

__all__ = ["zero_order", "ZeroOrderGradientModule"]


class _CallableModule(ModuleType):
    """A module type whose instances forward calls to their ``zero_order`` function."""

    def __call__(
        self, *args: Any, **kwargs: Any,
    ) -> Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]:
        return self.zero_order(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
