"""Differentiable approximations of functions by stochastic perturbations.

Mirrors ``optax/perturbations/_make_pert.py``. Where Optax takes a JAX key, these take an int
seed, an int64 seed tensor or a ``torch.Generator`` (see :mod:`optax_compat._src.utils`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import utils

DTypeLike = Union[torch.dtype, type]


def _torch_dtype(dtype: DTypeLike) -> torch.dtype:
    """A floating torch dtype; Python's ``float`` means JAX's default float."""
    dtype = bb.canonical_dtype(dtype)
    if not dtype.is_floating_point:
        raise TypeError(f"Noise samples need a floating-point torch dtype, got {dtype!r}.")
    return dtype


class Normal:
    """Standard normal distribution (``log_prob`` up to its additive constant)."""

    def sample(self, key: utils.KeyLike, sample_shape: Sequence[int] = (),
               dtype: DTypeLike = float) -> torch.Tensor:
        """Draws standard normal samples.

        Args:
          key: an int seed, an int64 seed tensor or a ``torch.Generator``.
          sample_shape: the shape of the samples.
          dtype: a floating-point torch dtype; ``float`` means the default dtype.

        Returns:
          A CPU tensor of shape ``sample_shape``.
        """
        generator = utils.generator_from_key(key)
        return torch.randn(tuple(sample_shape), generator=generator, dtype=_torch_dtype(dtype),
                           device=generator.device)

    def log_prob(self, inputs: torch.Tensor) -> torch.Tensor:
        """Elementwise log density, without the constant: ``-inputs ** 2 / 2``."""
        return -0.5 * inputs**2


class Gumbel:
    """Standard Gumbel distribution."""

    def sample(self, key: utils.KeyLike, sample_shape: Sequence[int] = (),
               dtype: DTypeLike = float) -> torch.Tensor:
        """Draws standard Gumbel samples ``-log(-log(U))``, ``U`` uniform on ``[tiny, 1)``.

        Args:
          key: an int seed, an int64 seed tensor or a ``torch.Generator``.
          sample_shape: the shape of the samples.
          dtype: a floating-point torch dtype; ``float`` means the default dtype.

        Returns:
          A CPU tensor of shape ``sample_shape``.
        """
        dtype = _torch_dtype(dtype)
        # Uniform on [tiny, 1) as jax.random.gumbel draws it, so that both logs stay finite.
        generator = utils.generator_from_key(key)
        uniform = torch.empty(tuple(sample_shape), dtype=dtype, device=generator.device).uniform_(
            torch.finfo(dtype).tiny, 1.0, generator=generator)
        return -torch.log(-torch.log(uniform))

    def log_prob(self, inputs: torch.Tensor) -> torch.Tensor:
        """Elementwise log density ``-inputs - exp(-inputs)``."""
        return -inputs - torch.exp(-inputs)


def _magicbox(log_prob: torch.Tensor) -> torch.Tensor:
    """DiCE's operator: 1 in value, with the derivatives of ``exp(log_prob)`` at that point."""
    return torch.exp(log_prob - log_prob.detach())


def _evaluate_batch(fun: Callable[[Any], Any], spec: Any, inputs: tm.Leaves,
                    num_samples: int) -> tuple[tm.Leaves, Any]:
    """``fun`` on each of ``num_samples`` stacked inputs, as stacked output leaves.

    Runs under ``torch.func.vmap``, or one sample at a time when ``fun`` cannot be vectorised
    (data-dependent Python control flow, ``.item()``...); ``fun`` need not be differentiable.
    """
    output_spec = []

    def on_leaves(*leaves: torch.Tensor) -> tm.Leaves:
        outputs, spec_out = tm.flatten(fun(tm.unflatten(spec, leaves)))
        output_spec.append(spec_out)
        return outputs

    try:
        stacked = torch.func.vmap(on_leaves)(*inputs)
    except RuntimeError:
        per_sample = [on_leaves(*[x[index] for x in inputs]) for index in range(num_samples)]
        stacked = [torch.stack(list(outputs)) for outputs in zip(*per_sample)]
    return list(stacked), output_spec[-1]


def make_perturbed_fun(
    fun: Callable[[Any], Any],
    num_samples: int = 1000,
    sigma: Union[float, torch.Tensor] = 0.1,
    noise: Any = Gumbel(),
    use_baseline: bool = True,
) -> Callable[[utils.KeyLike, Any], Any]:
    r"""Returns a differentiable approximation of a function, using stochastic perturbations.

    Let :math:`f` be a function, :math:`\sigma` a scalar, :math:`\mu` a noise distribution and

    .. math::
      f_\sigma(x) = \mathbb{E}_{z \sim \mu} f(x + \sigma z).

    The returned function gives unbiased Monte-Carlo estimates of :math:`f_\sigma(x)` whose
    derivatives of any order (through torch autograd) are unbiased estimates of those of
    :math:`f_\sigma`. Only values of :math:`f` are used, never its derivatives, so :math:`f`
    may be piecewise constant (an argmax, a rounding, a solver). The derivatives come from the
    score function estimator written with DiCE's "magic box", as in Optax; Optax's
    ``custom_jvp`` is not needed.

    Args:
      fun: the function to smooth, from a tree of tensors to a tree of tensors.
      num_samples: the number of perturbed inputs to average over.
      sigma: the scale of the perturbation (a number or a 0-d tensor).
      noise: a distribution with ``sample(key, sample_shape, dtype)`` and ``log_prob(inputs)``
        methods, like :class:`Gumbel` (the default) or :class:`Normal`.
      use_baseline: subtract ``fun`` at the unperturbed input from the score function estimate
        (variance reduction; the value estimate is unchanged).

    Returns:
      A function ``(key, x) -> tree`` where ``key`` is an int seed, an int64 seed tensor or a
      ``torch.Generator``, and ``x`` has the structure ``fun`` takes.

    References:
      Berthet et al., `Learning with Differentiable Perturbed Optimizers
      <https://arxiv.org/abs/2002.08676>`_, 2020

      Foerster et al., `DiCE: The Infinitely Differentiable Monte Carlo Estimator
      <https://arxiv.org/abs/1802.05098>`_, 2018
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}.")

    def mc_estimator(key: utils.KeyLike, x: Any) -> Any:
        xs, spec = tm.float_leaves(x, "x")
        if not xs:
            raise ValueError("make_perturbed_fun: the input tree has no leaves to perturb.")
        if type(noise) in (Normal, Gumbel):
            # Our own i.i.d. noises draw all samples of a leaf at once (same distribution).
            seeds = utils.split_key(key, len(xs))
            noises = [noise.sample(seed, (num_samples, *leaf.shape), leaf.dtype).to(leaf.device)
                      for seed, leaf in zip(seeds, xs)]
        else:
            # Optax's protocol for any other noise object: one key per sample, split over the
            # leaves, and ``sample`` called with each leaf's own shape.
            draws = [[noise.sample(seed, tuple(leaf.shape), leaf.dtype)
                      for seed, leaf in zip(utils.split_key(sample_key, len(xs)), xs)]
                     for sample_key in utils.split_key(key, num_samples)]
            noises = [torch.stack([torch.as_tensor(z) for z in per_leaf]).to(leaf.device)
                      for leaf, per_leaf in zip(xs, zip(*draws))]
        shifted = [(leaf + sigma * z).detach() for leaf, z in zip(xs, noises)]
        # The noise recovered from the detached points depends on x (and sigma) again: its log
        # density carries the gradient of the perturbation distribution. ``log_prob`` sees one
        # sample of one leaf, as in Optax (vectorised with ``torch.func.vmap``).
        recovered = [(point - leaf) / sigma for leaf, point in zip(xs, shifted)]
        log_prob = lambda z: noise.log_prob(z).sum()
        per_leaf = [_per_sample_log_prob(log_prob, z, num_samples) for z in recovered]
        box = _magicbox(sum(per_leaf[1:], start=per_leaf[0]))
        outputs, output_spec = _evaluate_batch(fun, spec, shifted, num_samples)
        weighted = [_per_sample(box, out) * out for out in outputs]
        if use_baseline:
            baseline = tm.leaves(fun(tm.unflatten(spec, [leaf.detach() for leaf in xs])))
            weighted = [out + _per_sample(1 - box, out) * base
                        for out, base in zip(weighted, baseline)]
        return tm.unflatten(output_spec, [out.mean(0) for out in weighted])

    return mc_estimator


def _per_sample_log_prob(log_prob: Callable[[torch.Tensor], torch.Tensor], samples: torch.Tensor,
                         num_samples: int) -> torch.Tensor:
    """``log_prob`` of each sample (leading axis), vectorised when ``log_prob`` allows it."""
    try:
        return torch.func.vmap(log_prob)(samples)
    except RuntimeError:
        return torch.stack([log_prob(samples[index]) for index in range(num_samples)])


def _per_sample(weights: torch.Tensor, stacked: torch.Tensor) -> torch.Tensor:
    """``weights`` (one per sample) shaped to broadcast against ``stacked`` samples."""
    return weights.reshape(-1, *([1] * (stacked.ndim - 1)))
