"""A module whose ``forward`` output is differentiated by zero-order gradient estimation."""

from __future__ import annotations

import abc
import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from torchopt_fn.diff.zero_order.decorator import Method, zero_order
from torchopt_fn.nn.stateless import reparametrize
from torchopt_fn.typing import Numeric, Samplable, TupleOfTensors

__all__ = ["ZeroOrderGradientModule"]


def enable_zero_order_gradients(
    cls: type[ZeroOrderGradientModule],
    method: Method = "naive",
    num_samples: int = 1,
    sigma: float = 1.0,
) -> type[ZeroOrderGradientModule]:
    """Wraps ``cls.forward`` so that gradients w.r.t. the parameters are estimated."""
    cls_forward = cls.forward
    if getattr(cls_forward, "__zero_order_gradients_enabled__", False):
        raise TypeError(
            "Zero-order gradient estimation is already enabled for the `forward` method.")

    @functools.wraps(cls_forward)
    def forward(self: ZeroOrderGradientModule, *input: Any, **kwargs: Any) -> torch.Tensor:
        named_params = tuple(self.named_parameters())
        if not named_params:
            raise RuntimeError("The module has no parameters.")
        params_names, flat_params = zip(*named_params, strict=True)

        @zero_order(self.sample, method=method, argnums=0, num_samples=num_samples, sigma=sigma)
        def forward_at(params: TupleOfTensors, *input: Any, **kwargs: Any) -> torch.Tensor:
            with reparametrize(self, zip(params_names, params, strict=True)):
                return cls_forward(self, *input, **kwargs)

        return forward_at(flat_params, *input, **kwargs)

    forward.__zero_order_gradients_enabled__ = True  # type: ignore[attr-defined]
    cls.forward = forward  # type: ignore[method-assign]
    return cls


class ZeroOrderGradientModule(nn.Module, Samplable):
    """Base class for modules whose scalar output gets zero-order gradients w.r.t. parameters.

    A subclass implements ``forward`` (returning a 0-d tensor) and ``sample(sample_shape)`` (the
    perturbation distribution), and picks the estimator with class keywords::

        class Policy(ZeroOrderGradientModule, method='antithetic', num_samples=64, sigma=0.1):
            ...

    See :func:`~torchopt_fn.diff.zero_order.zero_order` for the estimators.
    """

    def __init_subclass__(
        cls, method: Method = "naive", num_samples: int = 1, sigma: float = 1.0,
    ) -> None:
        """Wraps the subclass's ``forward`` with the chosen estimator."""
        super().__init_subclass__()
        enable_zero_order_gradients(cls, method=method, num_samples=num_samples, sigma=sigma)

    @abc.abstractmethod
    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Computes the scalar output of the model."""
        raise NotImplementedError

    @abc.abstractmethod
    def sample(
        self, sample_shape: torch.Size = torch.Size(),
    ) -> torch.Tensor | Sequence[Numeric]:
        """Draws perturbations of shape ``sample_shape``."""
        raise NotImplementedError
