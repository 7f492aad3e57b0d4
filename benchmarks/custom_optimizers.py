"""Optimizers written by hand, as a user would, for the benchmarks: ours and their JAX twins.

Adam-atan2 (Everett et al., *Scaling Exponents Across Parameterizations and Optimizers*, ICML
2024) replaces Adam's ``m / (sqrt(v) + eps)`` with ``a * atan2(m, b * sqrt(v))``: bounded,
scale-invariant, no epsilon. Optax does not have it. ``scale_by_adam_atan2`` below is the code
``notebooks/custom_optimizer.ipynb`` shows (a test keeps the two the same), declared elementwise
with :mod:`optax_compat.capabilities`; ``scale_by_adam_atan2_jax`` is the same rule in JAX, for
``jax.jit``. ``bench_all.py --optimizers adam_atan2`` times both.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import optree
import torch

import optax_compat as optax
from optax_compat import capabilities


class ScaleByAdamAtan2State(NamedTuple):
    count: torch.Tensor
    mu: Any
    nu: Any


def scale_by_adam_atan2(b1=0.9, b2=0.999, a=1.27, b=1.0):
    """Adam with atan2 in place of the division and epsilon (Everett et al., 2024)."""

    def init(params):
        return ScaleByAdamAtan2State(torch.zeros([], dtype=torch.int32),
                                     optax.tree.zeros_like(params),
                                     optax.tree.zeros_like(params))

    @capabilities.elementwise
    def update(updates, state, params=None):
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_increment(state.count)
        mu_hat = optax.tree.bias_correction(mu, b1, count)
        nu_hat = optax.tree.bias_correction(nu, b2, count)
        new = optree.tree_map(lambda m, v: a * torch.atan2(m, b * v.sqrt()), mu_hat, nu_hat)
        return new, ScaleByAdamAtan2State(count, mu, nu)

    return optax.GradientTransformation(init, update)


def adam_atan2(learning_rate, b1=0.9, b2=0.999, weight_decay=1e-4):
    """AdamW with atan2: decoupled weight decay, then the learning rate."""
    return optax.chain(scale_by_adam_atan2(b1, b2), optax.add_decayed_weights(weight_decay),
                       optax.scale_by_learning_rate(learning_rate))


def adam_atan2_jax(learning_rate: float, b1: float = 0.9, b2: float = 0.999,
                   weight_decay: float = 1e-4, a: float = 1.27, b: float = 1.0) -> Any:
    """The same optimizer in JAX with Optax's public building blocks (for ``jax.jit``)."""
    import jax
    import jax.numpy as jnp
    import optax as real_optax

    def init(params: Any) -> ScaleByAdamAtan2State:
        return ScaleByAdamAtan2State(jnp.zeros([], jnp.int32),
                                     real_optax.tree.zeros_like(params),
                                     real_optax.tree.zeros_like(params))

    def update(updates: Any, state: ScaleByAdamAtan2State, params: Any = None) -> Any:
        mu = real_optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = real_optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = real_optax.safe_increment(state.count)
        mu_hat = real_optax.tree.bias_correction(mu, b1, count)
        nu_hat = real_optax.tree.bias_correction(nu, b2, count)
        new = jax.tree.map(lambda m, v: a * jnp.arctan2(m, b * jnp.sqrt(v)), mu_hat, nu_hat)
        return new, ScaleByAdamAtan2State(count, mu, nu)

    return real_optax.chain(real_optax.GradientTransformation(init, update),
                            real_optax.add_decayed_weights(weight_decay),
                            real_optax.scale_by_learning_rate(learning_rate))


#: name -> (the optax_compat optimizer, its Optax twin), each ``builder(learning_rate)``.
CUSTOM = {"adam_atan2": (adam_atan2, adam_atan2_jax)}
