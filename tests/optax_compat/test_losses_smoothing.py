"""optax_compat.losses smooth_labels (``_smoothing``) against real Optax."""

from __future__ import annotations

import optax
import pytest
import torch

import optax_compat.losses as losses
from optax_compat.testing import compare_function_with_optax

DTYPES = [torch.float32, torch.float64]


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
