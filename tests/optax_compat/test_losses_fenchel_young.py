"""optax_compat.losses make_fenchel_young_loss (``_fenchel_young``) against real Optax."""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.special
import optax
import pytest
import torch

import optax_compat.losses as losses
from optax_compat.testing import compare_function_with_optax, seeded_randn

DTYPES = [torch.float32, torch.float64]


MAX_FUNS = {
    "logsumexp": (lambda x: torch.logsumexp(x, dim=-1), jax.scipy.special.logsumexp),
    "max": (lambda x: x.max(), jnp.max),
    "squared_norm": (lambda x: 0.5 * (x * x).sum(), lambda x: 0.5 * jnp.sum(x * x)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MAX_FUNS))
@pytest.mark.parametrize("score_shape, target_shape", [((5,), (5,)), ((3, 5), (3, 5)),
                                                       ((2, 3, 5), (3, 5))])
def test_make_fenchel_young_loss(dtype, name, score_shape, target_shape):
    ours_max, theirs_max = MAX_FUNS[name]
    scores = seeded_randn(*score_shape, dtype=dtype, scale=2.0)
    targets = torch.softmax(seeded_randn(*target_shape, dtype=dtype, seed=1), -1)
    compare_function_with_optax(losses.make_fenchel_young_loss(ours_max),
                                optax.losses.make_fenchel_young_loss(theirs_max),
                                (scores, targets), dtype=dtype, grad_argnums=(0, 1))


def test_fenchel_young_loss_of_logsumexp_is_softmax_cross_entropy():
    scores = seeded_randn(4, 6, dtype=torch.float64, scale=2.0)
    targets = torch.softmax(seeded_randn(4, 6, dtype=torch.float64, seed=1), -1)
    fy_loss = losses.make_fenchel_young_loss(lambda x: torch.logsumexp(x, -1))
    # logsumexp(s) - <y, s> is the cross entropy (Optax's loss leaves out the regularizer).
    torch.testing.assert_close(fy_loss(scores, targets),
                               losses.softmax_cross_entropy(scores, targets))
    gradient = torch.func.grad(lambda s: fy_loss(s, targets).sum())(scores)
    torch.testing.assert_close(gradient, torch.softmax(scores, -1) - targets)


def test_fenchel_young_loss_passes_extra_arguments_and_checks_sizes():
    fy_loss = losses.make_fenchel_young_loss(
        lambda x, offset, *, scale=1.0: scale * torch.logsumexp(x, -1) + offset)
    scores, targets = seeded_randn(2, 3), torch.full((2, 3), 1 / 3)
    got = fy_loss(scores, targets, 1.0, scale=2.0)
    expected = 2.0 * torch.logsumexp(scores, -1) + 1.0 - (targets * scores).sum(-1)
    torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="inconsistent size"):
        fy_loss(scores, torch.ones(2, 4), 0.0)
