"""optax_compat.losses ranking_softmax_loss (``_ranking``) against real Optax."""

from __future__ import annotations

import jax.numpy as jnp
import optax
import pytest
import torch

import optax_compat.losses as losses
from optax_compat.testing import compare_function_with_optax, seeded_randint, seeded_randn

DTYPES = [torch.float32, torch.float64]
REDUCTIONS = {"mean": (torch.mean, jnp.mean), "sum": (torch.sum, jnp.sum), "none": (None, None)}


def _ranking(reduction: str):
    ours_reduce, theirs_reduce = REDUCTIONS[reduction]
    return (lambda *a, **k: losses.ranking_softmax_loss(*a, reduce_fn=ours_reduce, **k),
            lambda *a, **k: optax.losses.ranking_softmax_loss(*a, reduce_fn=theirs_reduce, **k))


def _ranking_inputs(dtype, shape=(3, 5)):
    logits = seeded_randn(*shape, dtype=dtype, scale=2.0)
    labels = seeded_randint(3, *shape, seed=1).to(dtype)
    return logits, labels


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction, options", [
    ("mean", "plain"), ("mean", "where"), ("mean", "weights"), ("mean", "where_and_weights"),
    ("mean", "all_masked_list"), ("sum", "where_and_weights"), ("sum", "all_masked_list"),
    ("none", "plain"), ("none", "all_masked_list")])
def test_ranking_softmax_loss(dtype, reduction, options):
    logits, labels = _ranking_inputs(dtype)
    kwargs = {}
    if "where" in options or options == "all_masked_list":
        where = seeded_randn(3, 5, seed=2) > -0.7
        if options == "all_masked_list":
            where[1] = False
        kwargs["where"] = where
    if "weights" in options:
        kwargs["weights"] = torch.rand(3, 5, generator=torch.Generator().manual_seed(3),
                                       dtype=dtype)
    ours, theirs = _ranking(reduction)
    compare_function_with_optax(ours, theirs, (logits, labels), kwargs, dtype=dtype,
                                grad_argnums=(0,))


def test_ranking_softmax_loss_every_list_masked_gives_zero_and_finite_gradient():
    logits, labels = _ranking_inputs(torch.float32)
    logits.requires_grad_(True)
    where = torch.zeros(3, 5, dtype=torch.bool)
    loss = losses.ranking_softmax_loss(logits, labels, where=where)
    loss.backward()
    assert loss.item() == 0.0
    assert not torch.isnan(logits.grad).any()


def test_ranking_softmax_loss_batch_dimensions_integer_labels_and_custom_reduce():
    logits = seeded_randn(2, 3, 4)
    labels = seeded_randint(2, 2, 3, 4, seed=1, dtype=torch.int32)
    compare_function_with_optax(losses.ranking_softmax_loss, optax.losses.ranking_softmax_loss,
                                (logits, labels), grad_argnums=(0,))
    unreduced = losses.ranking_softmax_loss(logits, labels, reduce_fn=None)
    assert unreduced.shape == (2, 3)
    total = losses.ranking_softmax_loss(logits, labels, reduce_fn=lambda x, where: x.sum())
    torch.testing.assert_close(total, unreduced.sum())
