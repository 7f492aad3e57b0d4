"""Differentially private gradient aggregation and DP-SGD (mirrors ``optax/contrib/_privacy.py``).

References:
  Abadi et al., `Deep Learning with Differential Privacy <https://arxiv.org/abs/1607.00133>`_,
  2016.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import counter_random
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, transform, utils
from optax_compat.transforms import _accumulation, _clipping, _combining

Scalar = transform.Scalar


class DifferentiallyPrivateAggregateState(NamedTuple):
    """State of :func:`differentially_private_aggregate`: the seed of the next noise draw.

    Attributes:
      rng_key: an ``int64`` 0-d seed tensor.
    """

    rng_key: torch.Tensor


def differentially_private_aggregate(
    l2_norm_clip: Scalar,
    noise_multiplier: Scalar,
    key: Optional[utils.KeyLike] = None,
    *,
    seed: Optional[int] = None,
) -> base.GradientTransformation:
    """Clips per-example gradients, sums them, adds Gaussian noise and averages (DP-SGD).

    Unlike other transformations, ``update`` expects *per-example* gradients: every leaf has
    the examples on axis 0 (``torch.func.vmap(torch.func.grad(loss))`` gives them). Each
    example's gradient is clipped to global norm ``l2_norm_clip``, the clipped gradients are
    summed, noise of standard deviation ``l2_norm_clip * noise_multiplier`` is added, and the
    result is divided by the batch size. Put it first in a chain; accumulation wrappers such
    as ``MultiSteps`` do not compose with it.

    Args:
      l2_norm_clip: the largest L2 norm of one example's gradient.
      noise_multiplier: the noise standard deviation relative to ``l2_norm_clip``.
      key: an int seed or a ``torch.Generator`` (drawn from once, here) for the noise.
      seed: deprecated alias of ``key``.

    Returns:
      A :class:`~optax_compat.GradientTransformation` with a
      :class:`DifferentiallyPrivateAggregateState`.

    Raises:
      ValueError: if both ``key`` and ``seed`` are given.

    References:
      Abadi et al., `Deep Learning with Differential Privacy
      <https://arxiv.org/abs/1607.00133>`_, 2016.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.contrib.differentially_private_aggregate(l2_norm_clip=1.0,
      ...                                                      noise_multiplier=0.0, seed=0)
      >>> state = tx.init(params)
      >>> per_example_grads = {"w": torch.tensor([[3.0, 4.0], [0.3, 0.4]])}
      >>> updates, state = tx.update(per_example_grads, state, params)
      >>> updates["w"]
      tensor([0.4500, 0.6000])
    """
    initial_key = utils.initial_key(key, seed, "differentially_private_aggregate")
    noise_std = l2_norm_clip * noise_multiplier

    def init_fn(params: base.Params) -> DifferentiallyPrivateAggregateState:
        device = bb.device_of(params)
        return DifferentiallyPrivateAggregateState(rng_key=initial_key.to(device, copy=True))

    def update_fn(updates: base.Updates, state: DifferentiallyPrivateAggregateState,
                  params: Optional[base.Params] = None,
                  ) -> tuple[base.Updates, DifferentiallyPrivateAggregateState]:
        del params
        grads, spec = tm.flatten(updates)
        # Checks first that every leaf has the batch of examples on axis 0.
        clipped, _ = _clipping.per_example_global_norm_clip(grads, l2_norm_clip)
        batch_size = grads[0].shape[0]
        # Counter-based noise of the state's key, which then moves on: no host read, so the
        # step compiles whole (the noise matches Optax's in distribution, not draw by draw).
        first_draw = torch.zeros((), dtype=torch.int64, device=state.rng_key.device)
        noise = [leaf for _, run in counter_random.normal_chunks(state.rng_key, first_draw, clipped)
                 for leaf in run]
        noised = tm.div(tm.add(clipped, tm.mul(noise, tm.scalar_like(noise_std, noise))),
                        batch_size)
        return (tm.unflatten(spec, noised),
                DifferentiallyPrivateAggregateState(counter_random.next_key(state.rng_key)))

    return base.GradientTransformation(init_fn, update_fn)


def dpsgd(
    learning_rate: base.ScalarOrSchedule,
    l2_norm_clip: Scalar,
    noise_multiplier: Scalar,
    seed: int,
    momentum: Optional[Scalar] = None,
    nesterov: bool = False,
) -> base.GradientTransformation:
    """DP-SGD: SGD (with optional momentum) on differentially private aggregated gradients.

    ``update`` expects per-example gradients, with the examples on axis 0 of every leaf (see
    :func:`differentially_private_aggregate`).

    Args:
      learning_rate: the step size or its schedule.
      l2_norm_clip: the largest L2 norm of one example's gradient.
      noise_multiplier: the noise standard deviation relative to ``l2_norm_clip``.
      seed: the seed of the noise (an int or a ``torch.Generator``).
      momentum: decay of the momentum trace; none when ``None``.
      nesterov: use Nesterov momentum.

    Returns:
      A :class:`~optax_compat.GradientTransformation`.

    References:
      Abadi et al., `Deep Learning with Differential Privacy
      <https://arxiv.org/abs/1607.00133>`_, 2016.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.contrib.dpsgd(learning_rate=0.1, l2_norm_clip=1.0,
      ...                               noise_multiplier=0.0, seed=0)
      >>> state = opt.init(params)
      >>> per_example_grads = {"w": torch.tensor([[3.0, 4.0], [0.3, 0.4]])}
      >>> updates, state = opt.update(per_example_grads, state, params)
      >>> updates["w"]  # each example clipped to norm 1, then averaged
      tensor([-0.0450, -0.0600])
    """
    return _combining.chain(
        differentially_private_aggregate(l2_norm_clip=l2_norm_clip,
                                         noise_multiplier=noise_multiplier, key=seed),
        (_accumulation.trace(decay=momentum, nesterov=nesterov)
         if momentum is not None else base.identity()),
        transform.scale_by_learning_rate(learning_rate),
    )
