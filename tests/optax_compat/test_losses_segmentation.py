"""optax_compat.losses dice_loss, binary_dice_loss and multiclass_generalized_dice_loss
(``_segmentation``) against real Optax."""

from __future__ import annotations

import jax.numpy as jnp
import optax
import pytest
import torch

import optax_compat.losses as losses
from optax_compat.testing import compare_function_with_optax, seeded_randint, seeded_randn

DTYPES = [torch.float32, torch.float64]


def _segmentation_inputs(dtype, shape=(2, 4, 4, 3), seed=0):
    logits = seeded_randn(*shape, dtype=dtype, seed=seed)
    classes = seeded_randint(shape[-1], *shape[:-1], seed=seed + 1)
    targets = torch.nn.functional.one_hot(classes, shape[-1]).to(dtype)
    return logits, targets


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("options", [
    {}, {"alpha": 0.3, "beta": 0.7, "smooth": 0.5}, {"reduction": "sum"},
    {"reduction": "none"}, {"ignore_background": True}, {"class_weights": "weights"},
    {"axis": (1,)}, {"axis": (1, 2, 3), "reduction": "none"}])
def test_dice_loss_multiclass(dtype, options):
    logits, targets = _segmentation_inputs(dtype)
    if "class_weights" in options:
        options = {"class_weights": torch.tensor([0.2, 1.0, 3.0], dtype=dtype)}
    compare_function_with_optax(losses.dice_loss, optax.losses.dice_loss, (logits, targets),
                                options, dtype=dtype, grad_argnums=(0,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("prediction_shape, target_shape", [
    ((2, 5, 5), (2, 5, 5)), ((2, 5, 5, 1), (2, 5, 5)), ((2, 5, 5), (2, 5, 5, 1)),
    ((3, 4), (3, 4))])
def test_dice_loss_binary_shapes(dtype, prediction_shape, target_shape):
    logits = seeded_randn(*prediction_shape, dtype=dtype)
    targets = seeded_randint(2, *target_shape, seed=1).to(dtype)
    compare_function_with_optax(losses.dice_loss, optax.losses.dice_loss, (logits, targets),
                                dtype=dtype, grad_argnums=(0,))
    compare_function_with_optax(losses.binary_dice_loss, optax.losses.binary_dice_loss,
                                (logits, targets), {"smooth": 0.1}, dtype=dtype,
                                grad_argnums=(0,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_dice_loss_on_probabilities(dtype):
    logits, targets = _segmentation_inputs(dtype)
    probs = torch.softmax(logits, -1)
    # Optax checks the probabilities with a Python branch, so its side runs un-jitted.
    compare_function_with_optax(losses.dice_loss, optax.losses.dice_loss, (probs, targets),
                                {"apply_softmax": False}, dtype=dtype, grad_argnums=(0,),
                                jit=False)
    # With one channel the "probabilities sum to 1" check only accepts all-ones predictions,
    # so binary_dice_loss(apply_sigmoid=False) refuses anything else, in Optax as here.
    binary = torch.sigmoid(seeded_randn(2, 5, dtype=dtype))
    with pytest.raises(ValueError, match="sum to 1"):
        optax.losses.binary_dice_loss(jnp.asarray(binary.numpy()), jnp.ones((2, 5)),
                                      apply_sigmoid=False)
    with pytest.raises(ValueError, match="sum to 1"):
        losses.binary_dice_loss(binary, torch.ones(2, 5, dtype=dtype), apply_sigmoid=False)


def test_dice_loss_errors():
    logits, targets = _segmentation_inputs(torch.float32)
    with pytest.raises(ValueError, match="Shape mismatch"):
        losses.dice_loss(logits, targets[..., :2])
    with pytest.raises(ValueError, match="Unsupported reduction: max"):
        losses.dice_loss(logits, targets, reduction="max")
    with pytest.raises(ValueError, match="sum to 1 along the class axis"):
        losses.dice_loss(logits, targets, apply_softmax=False)
    with pytest.raises(ValueError, match="rank 1"):
        losses.dice_loss(logits, targets, class_weights=torch.ones(1, 3))


def test_dice_loss_perfect_overlap_is_zero():
    _, targets = _segmentation_inputs(torch.float64)
    loss = losses.dice_loss(targets, targets, apply_softmax=False, smooth=0.0)
    assert torch.equal(loss, torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("options", [{}, {"smooth": 0.1, "ignore_background": True}])
def test_multiclass_generalized_dice_loss(dtype, options):
    logits, targets = _segmentation_inputs(dtype, shape=(2, 3, 3, 4))
    compare_function_with_optax(losses.multiclass_generalized_dice_loss,
                                optax.losses.multiclass_generalized_dice_loss,
                                (logits, targets), options, dtype=dtype, grad_argnums=(0,))
