"""Classification losses (mirrors ``optax/losses/_classification.py``)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F

from optax_compat.losses import _ops
from optax_compat.projections import _projections

Axis = Union[int, tuple[int, ...], None]
Numeric = Union[torch.Tensor, float]


def _deprecated(replacement: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Marks a function as deprecated with Optax's message and ``DeprecationWarning``."""

    def decorate(fun: Callable[..., Any]) -> Callable[..., Any]:
        message = f"The function {fun.__name__} is deprecated. Please use {replacement} instead."

        @functools.wraps(fun)
        def warn_and_call(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(message, category=DeprecationWarning, stacklevel=2)
            return fun(*args, **kwargs)

        return warn_and_call

    return decorate


def _relu(x: torch.Tensor) -> torch.Tensor:
    # ``jnp.maximum(0, x)``: like JAX, a tie at 0 sends half the gradient to ``x``.
    return torch.maximum(x, torch.zeros((), dtype=x.dtype, device=x.device))


def sigmoid_binary_cross_entropy(logits: torch.Tensor, labels: Numeric) -> torch.Tensor:
    """Element-wise sigmoid cross entropy of ``logits`` against binary or soft ``labels``.

    Each element is an independent binary prediction (labels in ``{0, 1}`` or target
    probabilities), so this serves binary and multi-label classification alike; make sure
    ``logits`` and ``labels`` broadcast the way you mean.

    Args:
      logits: unnormalized log-probabilities of the positive class.
      labels: binary labels or target probabilities, broadcastable to ``logits``.

    Returns:
      The cross entropy of each prediction, shaped like ``logits`` (broadcast with ``labels``).

    References:
      Goodfellow et al, `Deep Learning <http://www.deeplearningbook.org/contents/prob.html>`_,
      2016

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> logits = torch.tensor([0.0, 2.0, -2.0])
      >>> labels = torch.tensor([1.0, 1.0, 0.0])
      >>> optax.losses.sigmoid_binary_cross_entropy(logits, labels)
      tensor([0.6931, 0.1269, 0.1269])
    """
    _ops.check_floating(logits)
    labels = torch.as_tensor(labels, device=logits.device).to(logits.dtype)
    # log(1 - sigmoid(x)) == log_sigmoid(-x), which stays finite for large x.
    return -labels * F.logsigmoid(logits) - (1.0 - labels) * F.logsigmoid(-logits)


def hinge_loss(predictor_outputs: torch.Tensor, targets: Numeric) -> torch.Tensor:
    """Hinge loss ``max(0, 1 - y * f(x))`` for binary classification.

    Args:
      predictor_outputs: outputs of the decision function.
      targets: target values, in ``{-1, 1}``.

    Returns:
      The element-wise loss.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> outputs = torch.tensor([2.0, 0.5, -0.5])
      >>> targets = torch.tensor([1.0, 1.0, -1.0])
      >>> optax.losses.hinge_loss(outputs, targets)
      tensor([0.0000, 0.5000, 0.5000])
    """
    return _relu(1 - torch.as_tensor(predictor_outputs) * targets)


def perceptron_loss(predictor_outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Binary perceptron loss ``max(0, -y * f(x))``.

    Args:
      predictor_outputs: scores produced by the model.
      targets: target values, in ``{-1, 1}``, shaped like ``predictor_outputs``.

    Returns:
      The element-wise loss.

    References:
      `Perceptron <https://en.wikipedia.org/wiki/Perceptron>`_, Wikipedia
    """
    _ops.check_shapes_equal(predictor_outputs, targets)
    return _relu(-torch.as_tensor(predictor_outputs) * targets)


def _sparse_plus(x: torch.Tensor) -> torch.Tensor:
    # ``jax.nn.sparse_plus``: 0 below -1, x above 1, (x + 1)^2 / 4 in between.
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    return torch.where(x <= -1.0, zero, torch.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


def sparsemax_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Binary sparsemax loss; zero if and only if ``sparse_sigmoid(logits) == labels``.

    Args:
      logits: scores produced by the model.
      labels: ground-truth labels, 0 or 1.

    Returns:
      The element-wise loss.

    References:
      Blondel, Martins and Niculae, `Learning with Fenchel-Young Losses
      <https://arxiv.org/abs/1901.02324>`_, JMLR 2020 (Sec. 4.4)
    """
    positive = torch.as_tensor(labels, device=logits.device).to(torch.bool)
    return _sparse_plus(torch.where(positive, -logits, logits))


class _WeightedLogSoftmax(torch.autograd.Function):
    """``where(weights != 0, weights * log_softmax(x), 0)`` along the last axis.

    The backward pass is written out (as Optax's custom JVP is) so that entries with
    ``x = -inf`` and ``weights = 0`` follow the ``0 log 0 = 0`` convention instead of
    producing ``nan`` gradients for ``x``.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        log_probs = torch.log_softmax(x, dim=-1)
        return torch.where(weights != 0.0, weights * log_probs, torch.zeros_like(log_probs))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        x, weights = ctx.saved_tensors
        grad_x = grad_weights = None
        if ctx.needs_input_grad[0]:
            weighted = weights * grad
            grad_x = weighted - torch.softmax(x, dim=-1) * weighted.sum(-1, keepdim=True)
            grad_x = grad_x.sum_to_size(x.shape)
        if ctx.needs_input_grad[1]:
            grad_weights = (grad * torch.log_softmax(x, dim=-1)).sum_to_size(weights.shape)
        return grad_x, grad_weights


def safe_softmax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Softmax cross entropy that treats ``labels * log_softmax(logits)`` as 0 where
    ``logits = -inf`` and ``labels = 0`` (the convention ``0 log 0 = 0``).

    Args:
      logits: unnormalized log-probabilities, ``[..., num_classes]``.
      labels: probability distributions, broadcastable to ``[..., num_classes]``.

    Returns:
      The cross entropy of each distribution, ``[...]``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> logits = torch.tensor([0.0, 0.0, -float("inf")])
      >>> labels = torch.tensor([1.0, 0.0, 0.0])
      >>> optax.losses.safe_softmax_cross_entropy(logits, labels)
      tensor(0.6931)
      >>> optax.losses.softmax_cross_entropy(logits, labels)
      tensor(nan)
    """
    _ops.check_floating(logits)
    labels = torch.as_tensor(labels, device=logits.device)
    return -_WeightedLogSoftmax.apply(logits, labels).sum(-1)


def softmax_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    axis: Axis = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""Softmax cross entropy between logits and target distributions (one-hot or soft).

    .. math::
      \sigma_i = -\sum_j y_{ij} \log \frac{\exp(x_{ij})}{\sum_k \exp(x_{ik})}

    Args:
      logits: unnormalized log-probabilities, ``[batch_size, num_classes]``.
      labels: target distributions (e.g. one-hot), ``[batch_size, num_classes]``.
      axis: axis or axes of the classes.
      where: elements to include, shaped like ``logits`` or like the batch (then expanded
        at ``axis``).

    Returns:
      The cross entropy of each example, ``[batch_size]``.

    References:
      `Cross-entropy <https://en.wikipedia.org/wiki/Cross-entropy>`_, Wikipedia

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
      >>> labels = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
      >>> optax.losses.softmax_cross_entropy(logits, labels)
      tensor([0.4076, 1.0986])
    """
    _ops.check_floating(logits)
    if where is not None and where.ndim != logits.ndim:
        where = _ops.expand_dims(where, axis)
    log_probs = _ops.log_softmax(logits, axis, where)
    return -_ops.masked_sum(labels * log_probs, axis, where)


def _flatten_class_axes(x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
    """Moves ``axes`` to the end (in order) and merges them into one."""
    batch_axes = tuple(a for a in range(x.ndim) if a not in axes)
    x = x.permute(batch_axes + axes)
    return x.reshape((*x.shape[:len(batch_axes)], -1))


def softmax_cross_entropy_with_integer_labels(
    logits: torch.Tensor,
    labels: torch.Tensor,
    axis: Union[int, tuple[int, ...]] = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""Softmax cross entropy between logits and integer class labels.

    .. math::
      \sigma_i = \log \sum_j \exp(x_{ij}) - x_{i y_i}

    Args:
      logits: unnormalized log-probabilities, ``[batch_size, num_classes]``.
      labels: integer class labels (int32 or int64), ``[batch_size]``, in
        ``[0, num_classes)``.
      axis: axis of the classes; with a tuple of axes the label is a flat index into the
        slice ``logits[axis]`` (``num_classes`` is the product of their sizes).
      where: elements to include, shaped like ``logits`` or like the batch.

    Returns:
      The cross entropy of each example, ``[batch_size]``; 0 where all classes are masked.

    References:
      `Cross-entropy <https://en.wikipedia.org/wiki/Cross-entropy>`_, Wikipedia

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
      >>> labels = torch.tensor([2, 0])
      >>> optax.losses.softmax_cross_entropy_with_integer_labels(logits, labels)
      tensor([0.4076, 1.0986])
    """
    _ops.check_floating(logits)
    _ops.check_integer(labels)
    if where is not None and where.ndim != logits.ndim:
        where = _ops.expand_dims(where, axis)
    if isinstance(axis, int):
        axis = _ops.canonicalize_axis(axis, logits.ndim)
    elif isinstance(axis, tuple):
        class_axes = tuple(_ops.canonicalize_axis(a, logits.ndim) for a in axis)
        axis = logits.ndim - len(class_axes)
        logits = _flatten_class_axes(logits, class_axes)
        if where is not None:
            where = _flatten_class_axes(torch.as_tensor(where), class_axes)
    else:
        raise ValueError("Keyword argument 'axis' must be of type 'int' or "
                         f"'tuple[int, ...]' but actual type is {type(axis)}.")
    # Only the label's logit is normalized, not the whole log-softmax.
    index = torch.as_tensor(labels, device=logits.device).to(torch.int64).unsqueeze(axis)
    label_logits = torch.gather(logits, axis, index).squeeze(axis)
    out = _ops.logsumexp(logits, axis, where=where) - label_logits
    if where is None:
        return out
    return torch.where(torch.as_tensor(where).to(torch.bool).any(axis), out,
                       torch.zeros((), dtype=out.dtype, device=out.device))


def _dot_last_dim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1)


def multiclass_hinge_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Multiclass hinge loss ``max_k (s_k + 1[k != y]) - s_y``.

    Args:
      scores: scores produced by the model, ``[..., num_classes]``.
      labels: ground-truth integer labels, ``[...]``.

    Returns:
      The loss of each example, ``[...]``.

    References:
      `Hinge loss <https://en.wikipedia.org/wiki/Hinge_loss>`_, Wikipedia
    """
    one_hot_labels = _ops.one_hot(labels, scores.shape[-1], scores.dtype).to(scores.device)
    return (scores + 1.0 - one_hot_labels).amax(-1) - _dot_last_dim(scores, one_hot_labels)


def multiclass_perceptron_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Multiclass perceptron loss ``max_k s_k - s_y``.

    Args:
      scores: scores produced by the model, ``[..., num_classes]``.
      labels: ground-truth integer labels, ``[...]``.

    Returns:
      The loss of each example, ``[...]``.

    References:
      Collins, Discriminative training methods for Hidden Markov Models: theory and
      experiments with perceptron algorithms, EMNLP 2002
    """
    one_hot_labels = _ops.one_hot(labels, scores.shape[-1], scores.dtype).to(scores.device)
    return scores.amax(-1) - _dot_last_dim(scores, one_hot_labels)


def poly_loss_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    epsilon: Numeric = 2.0,
    axis: Axis = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""Poly-1 loss: cross entropy plus ``epsilon * (1 - p_t)``.

    .. math::
      L_{Poly-1} = -\log(P_t) + \epsilon (1 - P_t)

    Args:
      logits: unnormalized log-probabilities, ``[..., num_classes]``.
      labels: target distributions, broadcastable to ``[..., num_classes]``.
      epsilon: coefficient of the first polynomial term (2.0 for ImageNet classification,
        -1.0 for detection in the paper).
      axis: axis or axes of the classes.
      where: elements to include.

    Returns:
      The loss of each example, ``[...]``.

    References:
      Leng et al, `PolyLoss: A Polynomial Expansion Perspective of Classification Loss
      Functions <https://arxiv.org/abs/2204.12511>`_, 2022
    """
    _ops.check_floating(logits)
    _ops.check_floating(labels)
    probs = _ops.softmax(logits, axis, where)
    one_minus_pt = _ops.masked_sum(labels * (1 - probs), axis, where)
    cross_entropy = softmax_cross_entropy(logits=logits, labels=labels, axis=axis, where=where)
    return cross_entropy + epsilon * one_minus_pt


def kl_divergence(
    log_predictions: torch.Tensor,
    targets: torch.Tensor,
    axis: Axis = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Kullback-Leibler divergence of the predicted distribution from the target one.

    Args:
      log_predictions: log-probabilities of the predicted distribution, ``[..., dim]``.
      targets: probabilities of the target distribution, ``[..., dim]`` (zeros contribute 0).
      axis: axis or axes of the distribution.
      where: elements to include.

    Returns:
      The divergence of each distribution, ``[...]``.

    References:
      Kullback and Leibler, `On Information and Sufficiency
      <https://www.jstor.org/stable/2236703>`_, 1951

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> log_predictions = torch.log(torch.tensor([0.25, 0.75]))
      >>> optax.losses.kl_divergence(log_predictions, torch.tensor([0.5, 0.5]))
      tensor(0.1438)
    """
    _ops.check_floating(log_predictions)
    _ops.check_floating(targets)
    log_targets = torch.where(targets == 0, torch.zeros((), dtype=targets.dtype,
                                                        device=targets.device),
                              torch.log(targets))
    return _ops.masked_sum(targets * (log_targets - log_predictions), axis, where)


def kl_divergence_with_log_targets(
    log_predictions: torch.Tensor,
    log_targets: torch.Tensor,
    axis: Axis = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Kullback-Leibler divergence with the targets given in log-space.

    Args:
      log_predictions: log-probabilities of the predicted distribution, ``[..., dim]``.
      log_targets: log-probabilities of the target distribution, ``[..., dim]``.
      axis: axis or axes of the distribution.
      where: elements to include.

    Returns:
      The divergence of each distribution, ``[...]``.
    """
    _ops.check_floating(log_predictions)
    _ops.check_floating(log_targets)
    loss = torch.exp(log_targets) * (log_targets - log_predictions)
    return _ops.masked_sum(loss, axis, where)


def generalized_kl_divergence(
    log_predictions: torch.Tensor,
    targets: torch.Tensor,
    axis: Axis = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Generalized Kullback-Leibler divergence, for unnormalized distributions.

    The Bregman divergence generated by ``f(x) = x log x - x``:
    ``KL(targets || predictions) + sum(predictions - targets)``.

    Args:
      log_predictions: log of the predicted (unnormalized) distribution, ``[..., dim]``.
      targets: the target (unnormalized, positive) distribution, ``[..., dim]``.
      axis: axis or axes of the distribution.
      where: elements to include.

    Returns:
      The divergence of each distribution, ``[...]``.

    References:
      Boyd and Vandenberghe, `Convex Optimization
      <https://stanford.edu/~boyd/cvxbook/bv_cvxbook.pdf>`_, p. 90

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> log_predictions = torch.log(torch.tensor([1.0, 2.0]))
      >>> optax.losses.generalized_kl_divergence(log_predictions, torch.tensor([1.0, 1.0]))
      tensor(0.3069)
    """
    kl = kl_divergence(log_predictions, targets, axis=axis, where=where)
    return kl + _ops.masked_sum(torch.exp(log_predictions) - targets, axis, where)


@_deprecated("generalized_kl_divergence")
def convex_kl_divergence(
    log_predictions: torch.Tensor,
    targets: torch.Tensor,
    axis: Axis = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Deprecated alias of :func:`generalized_kl_divergence`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> log_predictions = torch.log(torch.tensor([1.0, 2.0]))
      >>> optax.losses.convex_kl_divergence(log_predictions, torch.tensor([1.0, 1.0]))
      tensor(0.3069)
    """
    return generalized_kl_divergence(log_predictions, targets, axis=axis, where=where)


def _logaddexp_into_tail(phi: torch.Tensor, added: torch.Tensor) -> torch.Tensor:
    """``phi`` with ``phi[:, 1:]`` replaced by ``logaddexp(phi[:, 1:], added)``."""
    return torch.cat([phi[:, :1], torch.logaddexp(phi[:, 1:], added)], dim=-1)


def ctc_loss_with_forward_probs(
    logits: torch.Tensor,
    logit_paddings: torch.Tensor,
    labels: torch.Tensor,
    label_paddings: torch.Tensor,
    *,
    blank_id: int = 0,
    log_epsilon: Numeric = -1e5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""CTC loss and the CTC forward (alpha) log-probabilities.

    The forward variables are split into the blank part
    :math:`\alpha_{\mathrm{BLANK}}(t, n)` (after emitting ``n`` labels, at a blank) and the
    label part :math:`\alpha_{\mathrm{LABEL}}(t, n)` (at the ``n``-th label), over the
    blank-inserted alignments of Graves et al.

    Args:
      logits: ``(B, T, K)`` logits; ``K`` includes the blank class.
      logit_paddings: ``(B, T)`` padding indicators (1.0 marks a padded frame).
      labels: ``(B, N)`` integer reference labels.
      label_paddings: ``(B, N)`` padding indicators; labels must be right-padded.
      blank_id: class index of the blank.
      log_epsilon: finite stand-in for ``log(0)``.

    Returns:
      ``(loss, logalpha_blank, logalpha_nonblank)``: the ``(B,)`` negative log-likelihoods and
      the ``(T, B, N+1)`` and ``(T, B, N)`` forward log-probabilities.

    References:
      Graves et al, `Connectionist temporal classification: labelling unsegmented sequence
      data with recurrent neural networks <https://dl.acm.org/doi/10.1145/1143844.1143891>`_,
      2006

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> logits = torch.zeros(1, 2, 2)  # batch 1, 2 frames, classes {blank, 1}
      >>> labels = torch.tensor([[1]])
      >>> loss, logalpha_blank, logalpha_nonblank = optax.losses.ctc_loss_with_forward_probs(
      ...     logits, torch.zeros(1, 2), labels, torch.zeros(1, 1))
      >>> loss
      tensor([0.2877])
      >>> logalpha_blank.shape, logalpha_nonblank.shape
      (torch.Size([2, 1, 2]), torch.Size([2, 1, 1]))
    """
    _ops.check_rank(logits, 3)
    _ops.check_rank(labels, 2)
    _ops.check_shapes_equal(labels, label_paddings)
    _ops.check_shapes_equal(logits[..., 0], logit_paddings)
    batch_size, _, num_classes = logits.shape
    labels_batch_size, max_label_len = labels.shape
    if labels_batch_size != batch_size:
        raise ValueError(f"Expected `labels` to have batch size {batch_size}, got "
                         f"{labels_batch_size}.")
    dtype, device = logits.dtype, logits.device

    log_probs = torch.log_softmax(logits, dim=-1)
    label_lens = max_label_len - label_paddings.sum(dim=1).to(torch.int32)
    # repeat[b, n] is 1 when labels[b, n] == labels[b, n + 1] (a blank must separate them).
    repeat = F.pad((labels[:, :-1] == labels[:, 1:]).to(dtype), (0, 1))

    log_probs_blank = log_probs[:, :, blank_id:blank_id + 1].transpose(0, 1)  # [T, B, 1]
    label_one_hot = _ops.one_hot(labels, num_classes, dtype).to(device)  # [B, N, K]
    log_probs_emit = torch.einsum("btk,bnk->tbn", log_probs, label_one_hot)  # [T, B, N]
    pads = logit_paddings.transpose(0, 1).unsqueeze(-1)  # [T, B, 1]

    phi = torch.full((batch_size, max_label_len + 1), log_epsilon, dtype=dtype, device=device)
    phi = torch.cat([torch.zeros_like(phi[:, :1]), phi[:, 1:]], dim=-1)
    emit = torch.full((batch_size, max_label_len), log_epsilon, dtype=dtype, device=device)
    phis, emits = [], []
    for log_prob_emit, log_prob_blank, pad in zip(log_probs_emit, log_probs_blank, pads):
        # Label-to-blank epsilon transition, except into a repeated label.
        prev_phi = _logaddexp_into_tail(phi, emit + log_epsilon * repeat)
        # Blank-to-label and label self-loop transitions.
        next_emit = torch.logaddexp(prev_phi[:, :-1] + log_prob_emit, emit + log_prob_emit)
        # Blank self-loop, and label-to-blank emission only before a repeated label.
        next_phi = _logaddexp_into_tail(prev_phi + log_prob_blank,
                                        emit + log_prob_blank + log_epsilon * (1.0 - repeat))
        emit = pad * emit + (1.0 - pad) * next_emit
        phi = pad * phi + (1.0 - pad) * next_phi
        phis.append(phi)
        emits.append(emit)

    # The last step still needs its final label-to-blank epsilon transition.
    last_phi = _logaddexp_into_tail(phis[-1], emits[-1])
    logalpha_blank = torch.stack([*phis[:-1], last_phi])
    logalpha_nonblank = torch.stack(emits)
    length_one_hot = _ops.one_hot(label_lens, max_label_len + 1, dtype).to(device)
    per_seq_loss = -torch.einsum("bn,bn->b", last_phi, length_one_hot)
    return per_seq_loss, logalpha_blank, logalpha_nonblank


def ctc_loss(
    logits: torch.Tensor,
    logit_paddings: torch.Tensor,
    labels: torch.Tensor,
    label_paddings: torch.Tensor,
    *,
    blank_id: int = 0,
    log_epsilon: Numeric = -1e5,
) -> torch.Tensor:
    """CTC loss of each sequence; see :func:`ctc_loss_with_forward_probs`.

    Args:
      logits: ``(B, T, K)`` logits; ``K`` includes the blank class.
      logit_paddings: ``(B, T)`` padding indicators (1.0 marks a padded frame).
      labels: ``(B, N)`` integer reference labels.
      label_paddings: ``(B, N)`` padding indicators; labels must be right-padded.
      blank_id: class index of the blank.
      log_epsilon: finite stand-in for ``log(0)``.

    Returns:
      The ``(B,)`` negative log-likelihoods.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> logits = torch.zeros(1, 2, 2)  # batch 1, 2 frames, classes {blank, 1}
      >>> labels = torch.tensor([[1]])
      >>> optax.losses.ctc_loss(logits, torch.zeros(1, 2), labels, torch.zeros(1, 1))
      tensor([0.2877])
    """
    per_seq_loss, _, _ = ctc_loss_with_forward_probs(
        logits, logit_paddings, labels, label_paddings, blank_id=blank_id,
        log_epsilon=log_epsilon)
    return per_seq_loss


def sigmoid_focal_loss(
    logits: torch.Tensor,
    labels: Numeric,
    *,
    alpha: Optional[Numeric] = None,
    gamma: Numeric = 2.0,
) -> torch.Tensor:
    r"""Sigmoid focal loss ``-alpha_t (1 - p_t)^gamma log(p_t)``, computed in log space.

    The focal weight :math:`(1 - p_t)^\gamma` is ``exp(gamma * log(1 - p_t))`` with
    ``log(1 - p_t)`` a weighted logsumexp of the log-sigmoids, which stays finite for extreme
    logits and ``gamma < 2``, and accepts soft labels in ``[0, 1]``.

    Args:
      logits: unnormalized log-probabilities.
      labels: binary or soft labels, broadcastable to ``logits``.
      alpha: optional weight in ``(0, 1)`` of the positive examples (``1 - alpha`` for the
        negative ones).
      gamma: exponent of the modulating factor ``1 - p_t``.

    Returns:
      The element-wise loss, shaped like ``logits``.

    References:
      Lin et al, `Focal Loss for Dense Object Detection <https://arxiv.org/abs/1708.02002>`_,
      2017

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> logits = torch.tensor([0.0, 2.0, -2.0])
      >>> labels = torch.tensor([1.0, 1.0, 0.0])
      >>> optax.losses.sigmoid_focal_loss(logits, labels, gamma=2.0)
      tensor([0.1733, 0.0018, 0.0018])
    """
    _ops.check_floating(logits)
    labels = torch.as_tensor(labels, device=logits.device).to(logits.dtype)
    cross_entropy = sigmoid_binary_cross_entropy(logits, labels)
    log_p = F.logsigmoid(logits)
    log_q = F.logsigmoid(-logits)
    log_p, log_q, labels_b = torch.broadcast_tensors(log_p, log_q, labels)
    log_one_minus_p_t = _ops.logsumexp(torch.stack([log_p, log_q], dim=-1), axis=-1,
                                       b=torch.stack([1 - labels_b, labels_b], dim=-1))
    loss = cross_entropy * torch.exp(gamma * log_one_minus_p_t)
    if alpha is None:
        return loss
    return (alpha * labels + (1.0 - alpha) * (1.0 - labels)) * loss


def multiclass_sparsemax_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Multiclass sparsemax loss (the Fenchel-Young loss of the Gini negentropy).

    Args:
      scores: scores produced by the model, ``[batch_size, num_classes]``.
      labels: ground-truth integer labels, ``[batch_size]``.

    Returns:
      The loss of each example, ``[batch_size]``.

    References:
      Martins and Astudillo, `From Softmax to Sparsemax: A Sparse Model of Attention and
      Multi-Label Classification <https://arxiv.org/abs/1602.02068>`_, 2016
    """
    scores = torch.as_tensor(scores)
    labels = torch.as_tensor(labels, device=scores.device)
    if scores.ndim != 2 or labels.shape != scores.shape[:1]:
        raise ValueError("multiclass_sparsemax_loss expects scores of shape [batch_size, "
                         f"num_classes] and labels of shape [batch_size], got {tuple(scores.shape)}"
                         f" and {tuple(labels.shape)}.")
    proba = _projections.unit_simplex_rows(scores)
    index = labels.to(torch.int64).unsqueeze(-1)
    is_label = torch.arange(scores.shape[-1], device=scores.device) == index
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    # Conjugate of the Gini negentropy, relative to the label's score.
    shifted = torch.where(is_label, zero, scores - torch.gather(scores, -1, index))
    return (_dot_last_dim(proba, torch.where(proba != 0, shifted, zero))
            + 0.5 * (1.0 - _dot_last_dim(proba, proba)))


__all__ = [
    "convex_kl_divergence", "ctc_loss", "ctc_loss_with_forward_probs",
    "generalized_kl_divergence", "hinge_loss", "kl_divergence", "kl_divergence_with_log_targets",
    "multiclass_hinge_loss", "multiclass_perceptron_loss", "multiclass_sparsemax_loss",
    "perceptron_loss", "poly_loss_cross_entropy", "safe_softmax_cross_entropy",
    "sigmoid_binary_cross_entropy", "sigmoid_focal_loss", "softmax_cross_entropy",
    "softmax_cross_entropy_with_integer_labels", "sparsemax_loss",
]
