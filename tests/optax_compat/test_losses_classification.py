"""optax_compat.losses classification losses against real Optax, values and gradients."""

from __future__ import annotations

import math
import warnings

import numpy as np
import optax
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import optax_compat.losses as losses
from optax_compat.testing import (
    assert_leaves_close,
    compare_function_with_optax,
    jax_precision,
    seeded_randint,
    seeded_randn,
)

DTYPES = [torch.float32, torch.float64]


def probabilities(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.softmax(seeded_randn(*shape, dtype=dtype, seed=seed), dim=-1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, label_shape", [((), ()), ((5,), (5,)), ((2, 3), (2, 3)),
                                                ((2, 3), (3,))])
@pytest.mark.parametrize("soft", [False, True])
def test_sigmoid_binary_cross_entropy(dtype, shape, label_shape, soft):
    logits = seeded_randn(*shape, dtype=dtype, scale=3.0)
    labels = (torch.rand(label_shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
              if soft else seeded_randint(2, *label_shape, seed=1))
    compare_function_with_optax(losses.sigmoid_binary_cross_entropy,
                                optax.losses.sigmoid_binary_cross_entropy,
                                (logits, labels), dtype=dtype, grad_argnums=(0,))


def test_sigmoid_binary_cross_entropy_extreme_logits_and_integer_logits():
    logits = torch.tensor([-200.0, -30.0, 0.0, 30.0, 200.0])
    labels = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    compare_function_with_optax(losses.sigmoid_binary_cross_entropy,
                                optax.losses.sigmoid_binary_cross_entropy,
                                (logits, labels), grad_argnums=(0,))
    assert torch.isfinite(losses.sigmoid_binary_cross_entropy(logits, labels)).all()
    with pytest.raises(TypeError, match="floating"):
        losses.sigmoid_binary_cross_entropy(torch.tensor([1, 2]), labels[:2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["hinge_loss", "perceptron_loss"])
def test_binary_margin_losses(dtype, name):
    outputs = seeded_randn(3, 4, dtype=dtype, scale=2.0)
    targets = (2 * seeded_randint(2, 3, 4, seed=2) - 1).to(dtype)
    compare_function_with_optax(getattr(losses, name), getattr(optax.losses, name),
                                (outputs, targets), dtype=dtype, grad_argnums=(0,))


def test_perceptron_loss_refuses_to_broadcast():
    with pytest.raises(ValueError, match="Shape mismatch"):
        losses.perceptron_loss(torch.ones(3, 4), torch.ones(4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sparsemax_loss(dtype):
    logits = torch.linspace(-3, 3, 13, dtype=dtype) + 0.01
    labels = seeded_randint(2, 13, seed=3)
    compare_function_with_optax(losses.sparsemax_loss, optax.losses.sparsemax_loss,
                                (logits, labels), dtype=dtype, grad_argnums=(0,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("label_shape", [(3, 4), (4,)])
def test_safe_softmax_cross_entropy(dtype, label_shape):
    logits = seeded_randn(3, 4, dtype=dtype, scale=2.0)
    labels = probabilities(*label_shape, dtype=dtype, seed=1)
    compare_function_with_optax(losses.safe_softmax_cross_entropy,
                                optax.losses.safe_softmax_cross_entropy,
                                (logits, labels), dtype=dtype, grad_argnums=(0, 1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_safe_softmax_cross_entropy_minus_inf_logits_with_zero_labels(dtype):
    inf = math.inf
    logits = torch.tensor([[-inf, 0.0, 0.0], [-inf, 1.0, -2.0], [-inf, 0.0, -inf]],
                          dtype=dtype)
    labels = torch.tensor([[0.0, 0.5, 0.5], [0.0, 0.3, 0.7], [0.0, 1.0, 0.0]], dtype=dtype)
    compare_function_with_optax(losses.safe_softmax_cross_entropy,
                                optax.losses.safe_softmax_cross_entropy,
                                (logits, labels), dtype=dtype, grad_argnums=(0,))
    leaf = logits.clone().requires_grad_(True)
    losses.safe_softmax_cross_entropy(leaf, labels).sum().backward()
    assert torch.isfinite(leaf.grad).all()
    # softmax_cross_entropy has no such convention: 0 * -inf is nan there.
    assert torch.isnan(losses.softmax_cross_entropy(logits, labels)).all()
    expected = [math.log(2.0), None, 0.0]
    got = losses.safe_softmax_cross_entropy(logits, labels)
    for value, want in zip(got.tolist(), expected):
        if want is not None:
            assert value == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", [((3, 4), -1), ((3, 4), 0), ((2, 3, 4), (1, 2)),
                                         ((2, 3, 4), (0, 2)), ((2, 3), None)])
def test_softmax_cross_entropy_axes(dtype, shape, axis):
    logits = seeded_randn(*shape, dtype=dtype, scale=2.0)
    labels = torch.softmax(seeded_randn(*shape, dtype=dtype, seed=1).flatten(), 0).reshape(shape)
    compare_function_with_optax(losses.softmax_cross_entropy, optax.losses.softmax_cross_entropy,
                                (logits, labels), {"axis": axis}, dtype=dtype,
                                grad_argnums=(0, 1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("where_shape", [(3, 5), (3,)])
def test_softmax_cross_entropy_where(dtype, where_shape):
    logits = seeded_randn(3, 5, dtype=dtype, scale=2.0)
    labels = probabilities(3, 5, dtype=dtype, seed=1)
    where = torch.ones(where_shape, dtype=torch.bool)
    where[..., 1] = False
    if len(where_shape) == 2:
        where[2, 3] = False
    compare_function_with_optax(losses.softmax_cross_entropy, optax.losses.softmax_cross_entropy,
                                (logits, labels), {"where": where}, dtype=dtype,
                                grad_argnums=(0,))


def test_softmax_cross_entropy_requires_floating_logits():
    with pytest.raises(TypeError, match="floating"):
        losses.softmax_cross_entropy(torch.ones(2, 3, dtype=torch.int32), torch.ones(2, 3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis, label_dtype", [
    ((4, 5), -1, torch.int32), ((4, 5), 0, torch.int64), ((2, 3, 4), 1, torch.int32),
    ((1, 2, 3, 4), (2, 3), torch.int64), ((2, 3, 4), (0, 2), torch.int32)])
def test_softmax_cross_entropy_with_integer_labels(dtype, shape, axis, label_dtype):
    logits = seeded_randn(*shape, dtype=dtype, scale=2.0)
    axes = (axis,) if isinstance(axis, int) else axis
    axes = tuple(a % len(shape) for a in axes)
    batch_shape = tuple(s for i, s in enumerate(shape) if i not in axes)
    num_classes = math.prod(shape[a] for a in axes)
    labels = seeded_randint(num_classes, *batch_shape, seed=1, dtype=label_dtype)
    compare_function_with_optax(losses.softmax_cross_entropy_with_integer_labels,
                                optax.losses.softmax_cross_entropy_with_integer_labels,
                                (logits, labels), {"axis": axis}, dtype=dtype, grad_argnums=(0,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("full_mask", [True, False])
def test_softmax_cross_entropy_with_integer_labels_where(dtype, full_mask):
    logits = seeded_randn(4, 5, dtype=dtype, scale=2.0)
    labels = torch.tensor([0, 2, 4, 1], dtype=torch.int32)
    if full_mask:
        where = torch.ones(4, 5, dtype=torch.bool)
        where[:, 3] = False
        where[3] = False  # an example with no class left gives 0
    else:
        where = torch.tensor([True, False, True, True])
    compare_function_with_optax(losses.softmax_cross_entropy_with_integer_labels,
                                optax.losses.softmax_cross_entropy_with_integer_labels,
                                (logits, labels), {"where": where}, dtype=dtype,
                                grad_argnums=(0,))
    if full_mask:
        assert losses.softmax_cross_entropy_with_integer_labels(
            logits, labels, where=where)[3].item() == 0.0


def test_softmax_cross_entropy_with_integer_labels_errors():
    logits = torch.zeros(2, 3)
    with pytest.raises(TypeError, match="integer"):
        losses.softmax_cross_entropy_with_integer_labels(logits, torch.zeros(2))
    with pytest.raises(ValueError, match="'axis' must be of type"):
        losses.softmax_cross_entropy_with_integer_labels(logits, torch.zeros(2, dtype=int),
                                                         axis=[1])
    with pytest.raises(ValueError, match="out of bounds"):
        losses.softmax_cross_entropy_with_integer_labels(logits, torch.zeros(2, dtype=int),
                                                         axis=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["multiclass_hinge_loss", "multiclass_perceptron_loss",
                                  "multiclass_sparsemax_loss"])
def test_multiclass_margin_losses(dtype, name):
    scores = seeded_randn(6, 5, dtype=dtype, scale=2.0)
    labels = seeded_randint(5, 6, seed=1, dtype=torch.int32)
    compare_function_with_optax(getattr(losses, name), getattr(optax.losses, name),
                                (scores, labels), dtype=dtype, grad_argnums=(0,))


def test_multiclass_sparsemax_loss_zero_at_the_label_and_shape_check():
    scores = torch.tensor([[10.0, 0.0, 0.0], [0.0, 0.0, 10.0]])
    assert torch.equal(losses.multiclass_sparsemax_loss(scores, torch.tensor([0, 2])),
                       torch.zeros(2))
    with pytest.raises(ValueError, match=r"\[batch_size, num_classes\]"):
        losses.multiclass_sparsemax_loss(torch.zeros(3), torch.tensor(0))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("epsilon, options", [(2.0, {}), (-1.0, {"axis": 0}),
                                              (0.0, {"axis": (0, 1)}), (2.0, {"where": "mask"})])
def test_poly_loss_cross_entropy(dtype, epsilon, options):
    logits = seeded_randn(3, 4, dtype=dtype, scale=2.0)
    labels = probabilities(3, 4, dtype=dtype, seed=1)
    if options.get("where") == "mask":
        options = {"where": torch.tensor([[True, True, False, True]] * 3)}
    compare_function_with_optax(losses.poly_loss_cross_entropy,
                                optax.losses.poly_loss_cross_entropy,
                                (logits, labels), {"epsilon": epsilon, **options}, dtype=dtype,
                                grad_argnums=(0,))


def _kl_inputs(dtype):
    log_predictions = torch.log_softmax(seeded_randn(3, 4, dtype=dtype), -1)
    targets = probabilities(3, 4, dtype=dtype, seed=1)
    targets[0, 1] = 0.0  # a zero target contributes 0, not nan
    return log_predictions, targets


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["kl_divergence", "generalized_kl_divergence"])
@pytest.mark.parametrize("options", [{}, {"axis": 0}, {"axis": None},
                                     {"where": [[True, False, True, True]] * 3}])
def test_kl_divergences(dtype, name, options):
    log_predictions, targets = _kl_inputs(dtype)
    options = {k: torch.tensor(v) if k == "where" else v for k, v in options.items()}
    compare_function_with_optax(getattr(losses, name), getattr(optax.losses, name),
                                (log_predictions, targets), options, dtype=dtype,
                                grad_argnums=(0, 1))
    assert torch.isfinite(getattr(losses, name)(log_predictions, targets, **options)).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("options", [{}, {"axis": (0, 1)}, {"where": "mask"}])
def test_kl_divergence_with_log_targets(dtype, options):
    log_predictions = torch.log_softmax(seeded_randn(3, 4, dtype=dtype), -1)
    log_targets = torch.log_softmax(seeded_randn(3, 4, dtype=dtype, seed=1), -1)
    if options.get("where") == "mask":
        options = {"where": torch.tensor([[True], [False], [True]])}
    compare_function_with_optax(losses.kl_divergence_with_log_targets,
                                optax.losses.kl_divergence_with_log_targets,
                                (log_predictions, log_targets), options, dtype=dtype,
                                grad_argnums=(0, 1))


def test_convex_kl_divergence_is_deprecated_alias():
    log_predictions, targets = _kl_inputs(torch.float32)
    with pytest.warns(DeprecationWarning, match="generalized_kl_divergence"):
        ours = losses.convex_kl_divergence(log_predictions, targets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        compare_function_with_optax(losses.convex_kl_divergence,
                                    optax.losses.convex_kl_divergence,
                                    (log_predictions, targets), {"axis": -1})
    assert torch.equal(ours, losses.generalized_kl_divergence(log_predictions, targets))


def _ctc_inputs(dtype, batch=3, steps=6, num_classes=5, max_label_len=3, seed=0):
    logits = seeded_randn(batch, steps, num_classes, dtype=dtype, seed=seed, scale=2.0)
    logit_paddings = torch.zeros(batch, steps, dtype=dtype)
    logit_paddings[1, 4:] = 1.0
    logit_paddings[2, 5:] = 1.0
    labels = seeded_randint(num_classes - 1, batch, max_label_len, seed=seed + 1) + 1
    labels[0, 1] = labels[0, 0]  # a repeated label needs a blank in between
    label_paddings = torch.zeros(batch, max_label_len, dtype=dtype)
    label_paddings[1, 2:] = 1.0
    label_paddings[2, 1:] = 1.0
    return logits, logit_paddings, labels, label_paddings


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("blank_id, label_dtype", [(0, torch.int32), (2, torch.int64)])
def test_ctc_loss_with_forward_probs(dtype, blank_id, label_dtype):
    logits, logit_paddings, labels, label_paddings = _ctc_inputs(dtype)
    labels = labels.to(label_dtype)
    compare_function_with_optax(losses.ctc_loss_with_forward_probs,
                                optax.losses.ctc_loss_with_forward_probs,
                                (logits, logit_paddings, labels, label_paddings),
                                {"blank_id": blank_id}, dtype=dtype, grad_argnums=(0,))


def test_ctc_loss_is_the_first_output_with_forward_probs():
    inputs = _ctc_inputs(torch.float64)
    loss, _, _ = losses.ctc_loss_with_forward_probs(*inputs, blank_id=1, log_epsilon=-1e4)
    assert torch.equal(losses.ctc_loss(*inputs, blank_id=1, log_epsilon=-1e4), loss)
    compare_function_with_optax(losses.ctc_loss, optax.losses.ctc_loss, inputs,
                                {"log_epsilon": -1e4}, dtype=torch.float64)


def test_ctc_loss_one_to_one_alignment_is_minus_the_log_likelihood():
    # With as many frames as labels and no repeats, the only alignment emits each label once.
    labels = torch.tensor([[1, 2, 3]])
    logits = 10.0 * torch.nn.functional.one_hot(labels, 4).to(torch.float64)
    loss = losses.ctc_loss(logits, torch.zeros(1, 3, dtype=torch.float64), labels,
                           torch.zeros(1, 3, dtype=torch.float64))
    expected = -torch.log_softmax(logits, -1).gather(-1, labels[..., None]).sum()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-9)


def test_ctc_loss_shape_errors():
    logits, logit_paddings, labels, label_paddings = _ctc_inputs(torch.float32)
    with pytest.raises(ValueError, match="rank 3"):
        losses.ctc_loss(logits[0], logit_paddings, labels, label_paddings)
    with pytest.raises(ValueError, match="rank 2"):
        losses.ctc_loss(logits, logit_paddings, labels[0], label_paddings)
    with pytest.raises(ValueError, match="Shape mismatch"):
        losses.ctc_loss(logits, logit_paddings[:, :-1], labels, label_paddings)
    with pytest.raises(ValueError, match="batch size 3, got 2"):
        losses.ctc_loss(logits, logit_paddings, labels[:2], label_paddings[:2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha, gamma, soft", [(None, 2.0, False), (0.25, 2.0, True),
                                                (0.5, 0.0, False), (0.8, 1.5, True)])
def test_sigmoid_focal_loss(dtype, alpha, gamma, soft):
    logits = torch.cat([seeded_randn(10, dtype=dtype, scale=3.0),
                        torch.tensor([-60.0, 60.0], dtype=dtype)])
    labels = (torch.rand(12, generator=torch.Generator().manual_seed(1), dtype=dtype)
              if soft else seeded_randint(2, 12, seed=1))
    compare_function_with_optax(losses.sigmoid_focal_loss, optax.losses.sigmoid_focal_loss,
                                (logits, labels), {"alpha": alpha, "gamma": gamma},
                                dtype=dtype, grad_argnums=(0,))
    leaf = logits.clone().requires_grad_(True)
    losses.sigmoid_focal_loss(leaf, labels, alpha=alpha, gamma=gamma).sum().backward()
    assert torch.isfinite(leaf.grad).all()


def test_losses_compose_with_torch_func():
    # The custom backward passes also work under torch.func transforms.
    logits = seeded_randn(4, 3, scale=2.0)
    labels = probabilities(4, 3, dtype=torch.float32, seed=1)
    per_example = torch.func.vmap(losses.safe_softmax_cross_entropy)(logits, labels)
    np.testing.assert_allclose(per_example.numpy(),
                               losses.safe_softmax_cross_entropy(logits, labels).numpy(),
                               rtol=1e-6)
    grad = torch.func.grad(lambda s: losses.multiclass_sparsemax_loss(
        s, torch.tensor([0, 1, 2, 0])).sum())(logits)
    assert grad.shape == logits.shape and torch.isfinite(grad).all()


@pytest.mark.parametrize("name", ["safe_softmax_cross_entropy", "softmax_cross_entropy",
                                  "multiclass_sparsemax_loss", "sigmoid_focal_loss"])
def test_second_derivatives_match_optax(name):
    # Meta-learning differentiates through gradients: the custom backward passes must be
    # differentiable too, with Optax's (custom JVP) second derivatives.
    import jax
    import jax.numpy as jnp

    scores = seeded_randn(2, 4, dtype=torch.float64, scale=2.0)
    labels = (torch.tensor([1, 2]) if name == "multiclass_sparsemax_loss"
              else probabilities(2, 4, dtype=torch.float64, seed=1))
    if name == "safe_softmax_cross_entropy":
        scores[0, 0], labels[0] = -math.inf, torch.tensor([0.0, 0.2, 0.3, 0.5])
    ours = torch.autograd.functional.hessian(
        lambda s: getattr(losses, name)(s, labels).sum(), scores)
    with jax_precision(torch.float64):
        theirs = jax.jit(jax.hessian(
            lambda s: getattr(optax.losses, name)(s, jnp.asarray(labels.numpy())).sum()))(
                jnp.asarray(scores.numpy()))
        assert_leaves_close(ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["padded_sequences", "one_frame", "labels_equal_blank"])
def test_ctc_loss_edge_cases(dtype, case):
    if case == "padded_sequences":  # every frame of sequence 0, every label of sequence 1
        logits, logit_paddings = seeded_randn(3, 4, 4, dtype=dtype), torch.zeros(3, 4, dtype=dtype)
        labels, label_paddings = seeded_randint(3, 3, 2, seed=1) + 1, torch.zeros(3, 2, dtype=dtype)
        logit_paddings[0], label_paddings[1], label_paddings[2, 1] = 1.0, 1.0, 1.0
    elif case == "one_frame":
        logits, logit_paddings = seeded_randn(2, 1, 3, dtype=dtype), torch.zeros(2, 1, dtype=dtype)
        labels, label_paddings = seeded_randint(3, 2, 1, seed=1), torch.zeros(2, 1, dtype=dtype)
    else:
        logits, logit_paddings = seeded_randn(2, 5, 3, dtype=dtype), torch.zeros(2, 5, dtype=dtype)
        labels = torch.tensor([[0, 1, 1], [2, 2, 2]])
        label_paddings = torch.zeros(2, 3, dtype=dtype)
    compare_function_with_optax(losses.ctc_loss_with_forward_probs,
                                optax.losses.ctc_loss_with_forward_probs,
                                (logits, logit_paddings, labels, label_paddings), dtype=dtype,
                                grad_argnums=(0,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_integer_labels_with_axes_and_mask(dtype):
    logits = seeded_randn(2, 3, 4, dtype=dtype)
    where = seeded_randn(2, 3, 4, seed=3) > -0.5
    compare_function_with_optax(losses.softmax_cross_entropy_with_integer_labels,
                                optax.losses.softmax_cross_entropy_with_integer_labels,
                                (logits, seeded_randint(8, 3, seed=1)),
                                {"axis": (0, 2), "where": where}, dtype=dtype, grad_argnums=(0,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_multiclass_losses_with_ties_and_out_of_range_labels(dtype):
    scores = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 5.0, 5.0], [2.0, -2.0, 0.5, 0.5]],
                          dtype=dtype)
    for name, labels in [("multiclass_sparsemax_loss", torch.tensor([0, 2, 3])),
                         ("multiclass_perceptron_loss", torch.tensor([0, 7, -1])),
                         ("multiclass_hinge_loss", torch.tensor([1, 3, 9]))]:
        compare_function_with_optax(getattr(losses, name), getattr(optax.losses, name),
                                    (scores, labels), dtype=dtype, grad_argnums=(0,))


@settings(max_examples=15)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_integer_labels_property_against_optax(shape, data):
    """Random shapes, class axes (one or several), label dtypes and masks."""
    shape = tuple(shape)
    axes = data.draw(st.lists(st.sampled_from(range(len(shape))), min_size=1,
                              max_size=len(shape), unique=True))
    axis = axes[0] - len(shape) if len(axes) == 1 else tuple(axes)
    seed = data.draw(st.integers(0, 100))
    batch_shape = tuple(s for i, s in enumerate(shape) if i not in axes)
    labels = seeded_randint(math.prod(shape[a] for a in axes), *batch_shape, seed=seed,
                            dtype=data.draw(st.sampled_from([torch.int32, torch.int64])))
    kwargs = {"axis": axis}
    if data.draw(st.booleans()):
        kwargs["where"] = seeded_randn(*shape, seed=seed + 1) > -1.0
    compare_function_with_optax(losses.softmax_cross_entropy_with_integer_labels,
                                optax.losses.softmax_cross_entropy_with_integer_labels,
                                (seeded_randn(*shape, seed=seed, scale=2.0), labels), kwargs,
                                grad_argnums=(0,))
