"""Zero-order (evolution strategies) gradient estimation of black-box scalar functions.

With ``eps ~ D`` (a symmetric distribution with identity covariance, e.g. the standard normal),
the gradient of the smoothed function ``f_sigma(theta) = E[f(theta + sigma eps)]`` is estimated by
averaging over ``num_samples`` perturbations:

* ``'naive'``:      ``f(theta + sigma eps) eps / sigma``
* ``'forward'``:    ``(f(theta + sigma eps) - f(theta)) eps / sigma``
* ``'antithetic'``: ``(f(theta + sigma eps) - f(theta - sigma eps)) eps / (2 sigma)``

All three are unbiased for ``grad f_sigma`` (for a Gaussian ``eps``, and for any ``eps`` with
identity covariance when ``f`` is quadratic); the baseline and antithetic forms remove the
``f(theta) eps`` term whose variance dominates the naive estimator. TorchOpt 0.7.3's ``'forward'``
is scaled by ``sigma ** 2`` and replaces its baseline after the first sample; this one is not.

Reference: Salimans et al., "Evolution Strategies as a Scalable Alternative to Reinforcement
Learning", 2017; Nesterov & Spokoiny, "Random Gradient-Free Minimization of Convex Functions", 2017.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias

import torch

from torchopt_fn import pytree
from torchopt_fn.diff._custom_vjp import attach_vjp
from torchopt_fn.typing import Numeric, Samplable, SampleFunc

__all__ = ["zero_order"]

Method: TypeAlias = Literal["naive", "forward", "antithetic"]
_METHODS = ("naive", "forward", "antithetic")


class WrappedSamplable(Samplable):
    """Makes a sampling function ``sample_fn(sample_shape)`` a :class:`Samplable`."""

    def __init__(self, sample_fn: SampleFunc) -> None:
        """Wraps ``sample_fn``."""
        self.sample_fn = sample_fn

    def sample(
        self, sample_shape: torch.Size = torch.Size(),
    ) -> torch.Tensor | Sequence[Numeric]:
        """Returns ``sample_fn(sample_shape)``."""
        return self.sample_fn(sample_shape)


def _sample_like(distribution: Samplable, param: torch.Tensor) -> torch.Tensor:
    """A perturbation shaped, typed and placed like ``param``."""
    noise = torch.as_tensor(distribution.sample(param.shape), dtype=param.dtype,
                            device=param.device)
    if noise.shape != param.shape:
        raise ValueError(f"zero_order: distribution.sample({tuple(param.shape)}) returned shape "
                         f"{tuple(noise.shape)}; the distribution must have scalar batch and "
                         "event shapes.")
    return noise


def _zero_order(
    fn: Callable[..., torch.Tensor],
    distribution: Samplable,
    method: Method,
    argnums: tuple[int, ...],
    num_samples: int,
    sigma: float,
) -> Callable[..., torch.Tensor]:
    """Wraps ``fn`` so that its gradient w.r.t. the arguments ``argnums`` is estimated."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> torch.Tensor:
        for argnum in argnums:
            if not -len(args) <= argnum < len(args):
                raise ValueError(f"zero_order: argnums={argnum} is out of range for a call with "
                                 f"{len(args)} positional arguments.")
        flat_params, params_treespec = pytree.tree_flatten([args[i] for i in argnums])
        if not flat_params or not all(isinstance(p, torch.Tensor) for p in flat_params):
            raise TypeError("zero_order: the arguments selected by argnums must be tensors or "
                            "trees of tensors.")

        def value_at(params: Sequence[torch.Tensor]) -> torch.Tensor:
            call_args = list(args)
            for argnum, value in zip(argnums, pytree.tree_unflatten(params_treespec, params),
                                     strict=True):
                call_args[argnum] = value
            return fn(*call_args, **kwargs)

        with torch.no_grad():
            output = fn(*args, **kwargs)
        if not isinstance(output, torch.Tensor) or output.ndim != 0:
            raise RuntimeError("zero_order: the function must return a scalar (0-d) tensor.")

        def estimate_gradient(
            outputs: tuple[torch.Tensor, ...],
            params: tuple[torch.Tensor, ...],
            cotangents: tuple[torch.Tensor, ...],
        ) -> list[torch.Tensor]:
            (baseline,), (cotangent,) = outputs, cotangents
            total = [torch.zeros_like(p) for p in params]
            for _ in range(num_samples):
                noises = [_sample_like(distribution, p) for p in params]
                plus = value_at(pytree.tree_add_scalar_mul(list(params), noises, alpha=sigma))
                if method == "naive":
                    weight = plus / sigma
                elif method == "forward":
                    weight = (plus - baseline) / sigma
                else:
                    minus = value_at(pytree.tree_sub_scalar_mul(list(params), noises, alpha=sigma))
                    weight = (plus - minus) / (2 * sigma)
                total = pytree.tree_add_scalar_mul(total, noises, alpha=weight)
            return pytree.tree_scalar_mul(cotangent / num_samples, total)

        (result,) = attach_vjp([output.detach()], flat_params, estimate_gradient)
        return result

    return wrapped


def zero_order(
    distribution: SampleFunc | Samplable,
    method: Method = "naive",
    argnums: int | tuple[int, ...] = (0,),
    num_samples: int = 1,
    sigma: float = 1.0,
) -> Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]:
    """Returns a decorator estimating the gradient of a scalar function by random perturbations.

    The decorated function is evaluated normally (without autograd); its backward pass samples
    ``num_samples`` perturbations per call and returns the estimate of the module docstring,
    times the incoming cotangent. Seed the generator used by ``distribution`` for reproducibility.

    Args:
        distribution: A :class:`~torchopt_fn.typing.Samplable` (e.g. a scalar
            ``torch.distributions.Normal(0., 1.)``) or a function ``sample(sample_shape)``
            returning a tensor of that shape; it should be symmetric with unit variance.
        method: ``'naive'``, ``'forward'`` or ``'antithetic'``.
        argnums: The positions of the arguments to differentiate (tensors or trees of tensors).
        num_samples: The number of perturbations averaged per backward pass.
        sigma: The scale of the perturbations.

    Returns:
        The decorator.

    Raises:
        ValueError: For an unknown method, ``num_samples < 1`` or ``sigma <= 0``.
        TypeError: If ``distribution`` can neither sample nor be called.
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}.")
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}.")
    if not sigma > 0:
        raise ValueError(f"sigma must be positive, got {sigma}.")
    if not isinstance(distribution, Samplable):
        if not callable(distribution):
            raise TypeError("`distribution` must be a callable or an instance of `Samplable`.")
        distribution = WrappedSamplable(distribution)
    return functools.partial(
        _zero_order,
        distribution=distribution,
        method=method,
        argnums=(argnums,) if isinstance(argnums, int) else tuple(argnums),
        num_samples=num_samples,
        sigma=sigma,
    )
