"""Small utilities: random keys, gradient scaling, distributions (mirrors ``optax/_src/utils.py``).

Randomness: where Optax takes a ``jax.random`` key, this package takes a *key-like*: an int
seed, an int64 0-d tensor seed, or a ``torch.Generator``. States store keys as int64 0-d tensors
so they stay plain, device-placed, checkpointable pytrees; a fresh ``torch.Generator`` is
seeded from the key wherever numbers are drawn, which makes every stream reproducible.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, Union

import torch

from optax_compat._runtime import tree_math as tm

KeyLike = Union[int, torch.Tensor, torch.Generator]

_SEED_BOUND = 2**62


def canonicalize_key(key_or_seed: KeyLike, device: Any = None) -> torch.Tensor:
    """Turns an int seed, a seed tensor or a ``torch.Generator`` into an int64 0-d seed tensor.

    A generator is consumed (one draw), so that the same generator gives a new key each time.
    """
    if isinstance(key_or_seed, torch.Generator):
        seed = torch.randint(_SEED_BOUND, (), generator=key_or_seed,
                             device=key_or_seed.device, dtype=torch.int64)
        return seed.to(device) if device is not None else seed
    if isinstance(key_or_seed, torch.Tensor):
        if key_or_seed.dtype.is_floating_point or key_or_seed.numel() != 1:
            raise TypeError(f"A key tensor must hold one integer seed, got {key_or_seed!r}.")
        return key_or_seed.reshape(()).to(dtype=torch.int64, device=device)
    if isinstance(key_or_seed, bool) or not isinstance(key_or_seed, int):
        raise TypeError("A random key must be an int seed, an integer tensor or a "
                        f"torch.Generator, got {type(key_or_seed).__name__}.")
    return torch.tensor(key_or_seed, dtype=torch.int64, device=device)


def initial_key(key: KeyLike | None, seed: KeyLike | None, name: str) -> torch.Tensor:
    """The canonical key of a transform taking Optax's ``key`` and deprecated ``seed``.

    Warns (``DeprecationWarning``) when ``seed`` is given and (``UserWarning``) when neither is,
    using key 0 then, as Optax does. Canonicalised once, so that every ``init`` of the
    transform starts the same stream, even from a generator.

    Raises:
      ValueError: if both ``key`` and ``seed`` are given.
    """
    if seed is not None:
        warnings.warn('"seed" is deprecated, use "key".', DeprecationWarning, stacklevel=3)
        if key is not None:
            raise ValueError("Only one of seed or key can be specified.")
        key = seed
    if key is None:
        warnings.warn(f"{name}: no key given, using key=0.", stacklevel=3)
        key = 0
    return canonicalize_key(key)


def generator_from_key(key: KeyLike, device: Any = None) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded deterministically from ``key``."""
    seed = canonicalize_key(key)
    generator = torch.Generator(device=device if device is not None else "cpu")
    generator.manual_seed(int(seed))
    return generator


def split_key(key: KeyLike, num: int = 2) -> torch.Tensor:
    """Derives ``num`` independent int64 seeds from ``key`` (``jax.random.split``'s role)."""
    generator = generator_from_key(key)
    return torch.randint(_SEED_BOUND, (num,), generator=generator, dtype=torch.int64,
                         device=generator.device)


class _ScaleGradient(torch.autograd.Function):
    """Identity forward; multiplies the incoming gradient by ``scale`` backward."""

    @staticmethod
    def forward(scale: Any, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(x.view_as(x) for x in inputs)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.scale = inputs[0]

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        return (None, *tm.mul(list(grads), ctx.scale))


def scale_gradient(inputs: Any, scale: Union[float, torch.Tensor]) -> Any:
    """Identity on the forward pass; scales gradients by ``scale`` on the backward pass.

    Args:
      inputs: a tree of tensors.
      scale: the gradient factor; ``1`` returns ``inputs``, ``0`` detaches them.

    Returns:
      A tree with the values of ``inputs``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
      >>> y = optax.scale_gradient(x, 0.5)
      >>> (y * y).sum().backward()
      >>> x.grad
      tensor([1., 2.])
    """
    if isinstance(scale, (int, float)) and scale == 1.0:
        return inputs
    if isinstance(scale, (int, float)) and scale == 0.0:
        return tm.tree_map(torch.Tensor.detach, inputs)
    xs, spec = tm.flatten(inputs)
    return tm.unflatten(spec, list(_ScaleGradient.apply(scale, *xs)))


class MultiNormalDiagFromLogScale:
    """A diagonal multivariate normal parameterised by its mean and log standard deviation."""

    def __init__(self, loc: torch.Tensor, log_scale: torch.Tensor) -> None:
        self._mean = torch.as_tensor(loc)
        self._log_scale = torch.as_tensor(log_scale)
        self._scale = torch.exp(self._log_scale)
        self._param_shape = torch.broadcast_shapes(self._mean.shape, self._scale.shape)

    def sample(self, shape: Sequence[int], key: KeyLike) -> torch.Tensor:
        """Draws samples of shape ``(*shape, *param_shape)``."""
        generator = generator_from_key(key)
        noise = torch.randn((*shape, *self._param_shape), generator=generator,
                            dtype=self._mean.dtype, device=generator.device)
        return noise.to(self._mean.device) * self._scale + self._mean

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Log density of ``x``, summed over the parameter dimensions."""
        log_density = (-0.5 * ((x - self._mean) / self._scale) ** 2 - self._log_scale
                       - 0.5 * math.log(2 * math.pi))
        return log_density.sum(dim=tuple(range(-len(self._param_shape), 0)))

    @property
    def log_scale(self) -> torch.Tensor:
        """The log standard deviation."""
        return self._log_scale

    @property
    def params(self) -> list[torch.Tensor]:
        """``[mean, log_scale]``."""
        return [self._mean, self._log_scale]


def multi_normal(loc: torch.Tensor, log_scale: torch.Tensor) -> MultiNormalDiagFromLogScale:
    """A diagonal normal distribution with mean ``loc`` and std ``exp(log_scale)``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> dist = optax.multi_normal(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.0]))
      >>> dist.sample((3,), key=0).shape
      torch.Size([3, 2])
      >>> dist.log_prob(torch.tensor([0.0, 1.0]))
      tensor(-1.8379)
    """
    return MultiNormalDiagFromLogScale(loc=loc, log_scale=log_scale)
