"""optax_compat.losses ntxent and triplet_margin_loss (``_self_supervised``) against real
Optax."""

from __future__ import annotations

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
