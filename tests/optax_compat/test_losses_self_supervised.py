"""optax_compat.losses ntxent, triplet_margin_loss, smooth_labels and make_fenchel_young_loss
against real Optax."""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.special
import optax
import pytest
import torch

import optax_compat.losses as losses
from optax_compat.testing import compare_function_with_optax, seeded_randn

DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("labels, temperature", [([0, 0, 1, 1, 2, 2], 0.07),
                                                 ([0, 1, 0, 1, 1, 2], 0.5)])
def test_ntxent(dtype, labels, temperature):
    embeddings = seeded_randn(6, 3, dtype=dtype)
    labels = torch.tensor(labels, dtype=torch.int32)
    compare_function_with_optax(losses.ntxent, optax.losses.ntxent, (embeddings, labels),
                                {"temperature": temperature}, dtype=dtype, grad_argnums=(0,))


def test_ntxent_errors():
    with pytest.raises(ValueError, match="same leading dimension"):
        losses.ntxent(torch.ones(4, 2), torch.tensor([0, 0, 1]))
    with pytest.raises(TypeError, match="floating"):
        losses.ntxent(torch.ones(2, 2, dtype=torch.int64), torch.tensor([0, 0]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("options", [{}, {"norm_degree": 1}, {"norm_degree": 3, "margin": 2.0},
                                     {"axis": 0, "eps": 1e-3}, {"margin": 0.1}])
def test_triplet_margin_loss(dtype, options):
    anchors, positives, negatives = (seeded_randn(4, 3, dtype=dtype, seed=s) for s in range(3))
    # Positive differences keep odd norm degrees real (Optax takes no absolute value).
    positives, negatives = anchors - 0.3 * positives.abs(), anchors - negatives.abs()
    compare_function_with_optax(losses.triplet_margin_loss, optax.losses.triplet_margin_loss,
                                (anchors, positives, negatives), options, dtype=dtype,
                                grad_argnums=(0, 1, 2))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("options", [{}, {"axis": 0}, {"axis": None}, {"axis": (0, 1)},
                                     {"where": "mask"}])
def test_smooth_labels(dtype, options):
    labels = torch.nn.functional.one_hot(torch.tensor([[0, 2], [1, 3], [3, 0]]), 4).to(dtype)
    if "where" in options:
        options = {"where": torch.tensor([True, False, True, True])}
    compare_function_with_optax(losses.smooth_labels, optax.losses.smooth_labels, (labels, 0.2),
                                options, dtype=dtype, grad_argnums=(0,))


def test_smooth_labels_requires_floating_labels():
    with pytest.raises(TypeError, match="floating"):
        losses.smooth_labels(torch.tensor([0, 1]), 0.1)


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
