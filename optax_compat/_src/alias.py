"""Ready-made optimizers: chains of gradient transformations (mirrors ``optax/_src/alias.py``).

Every alias returns a :class:`~optax_compat.GradientTransformationExtraArgs` built with
:func:`~optax_compat.chain` from the transformations of ``_src/transform.py`` and
``transforms/``, in the same order and with the same state layout as Optax, so that the states
of both libraries match leaf for leaf. Aliases whose last step is
:func:`~optax_compat.scale_by_learning_rate` return *descent* directions: apply them with
:func:`~optax_compat.apply_updates`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import adam_engine
from optax_compat._runtime import momentum_step as momentum_step_module
from optax_compat._src import base, factorized, transform
from optax_compat._src import linesearch as _linesearch
from optax_compat._src.transform import scale_by_lbfgs
from optax_compat.transforms import _accumulation, _adding, _clipping, _combining, _masking

Scalar = float | torch.Tensor
MaskOrFn = Any | Callable[[base.Params], Any] | None


def adabelief(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-16,
    eps_root: Scalar = 1e-16,
    *,
    nesterov: bool = False,
) -> base.GradientTransformationExtraArgs:
    """AdaBelief: Adam whose second moment tracks the variance of the gradient around its EMA.

    Args:
      learning_rate: a fixed step size or a schedule of the step count.
      b1: decay of the first moment.
      b2: decay of the "belief" (squared prediction error) moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the belief moment (inside the square root).
      nesterov: use a Nesterov-style first moment.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Zhuang et al, `AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed
      Gradients <https://arxiv.org/abs/2010.07468>`_, 2020.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.adabelief(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.6523, -1.6506])
    """
    return _combining.chain(
        transform.scale_by_belief(b1=b1, b2=b2, eps=eps, eps_root=eps_root, nesterov=nesterov),
        transform.scale_by_learning_rate(learning_rate),
    )


def adadelta(
    learning_rate: base.ScalarOrSchedule | None = None,
    rho: Scalar = 0.9,
    eps: Scalar = 1e-6,
    weight_decay: base.ScalarOrSchedule = 0.0,
    weight_decay_mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    """Adadelta: per-coordinate step sizes from running averages of squared gradients and updates.

    Args:
      learning_rate: a fixed step size or a schedule; ``None`` is treated as Optax does by
        :func:`~optax_compat.scale_by_learning_rate`.
      rho: decay of both running averages.
      eps: added inside the square roots.
      weight_decay: strength of the L2 penalty added to the gradient (a schedule is allowed).
      weight_decay_mask: a tree of booleans (or a function of the params returning one)
        selecting the leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Zeiler, `Adadelta: An Adaptive Learning Rate Method
      <https://arxiv.org/abs/1212.5701>`_, 2012.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.adadelta(learning_rate=1.0)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.9903, -1.9903])
    """
    return _combining.chain(
        _adding.add_decayed_weights(weight_decay, mask=weight_decay_mask),
        transform.scale_by_adadelta(rho=rho, eps=eps),
        transform.scale_by_learning_rate(learning_rate),
    )


def adafactor(
    learning_rate: base.ScalarOrSchedule | None = None,
    min_dim_size_to_factor: int = 128,
    decay_rate: Scalar = 0.8,
    decay_offset: Scalar = 0,
    multiply_by_parameter_scale: bool = True,
    clipping_threshold: Scalar | None = 1.0,
    momentum: Scalar | None = None,
    dtype_momentum: torch.dtype = torch.float32,
    weight_decay_rate: base.ScalarOrSchedule | None = None,
    eps: Scalar = 1e-30,
    factored: bool = True,
    weight_decay_mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    """Adafactor: Adam-like scaling with a factored (row/column) second moment.

    Args:
      learning_rate: a fixed step size or a schedule; ``None`` skips the scaling (the
        parameter-scale factor then plays the role of a relative step size).
      min_dim_size_to_factor: only leaves whose two largest dimensions are at least this big
        get a factored second moment.
      decay_rate: exponent of the second-moment decay schedule.
      decay_offset: offset of the step count in that schedule (for fine-tuning).
      multiply_by_parameter_scale: scale the step by the RMS of each parameter block.
      clipping_threshold: clip the update's block RMS to this value; ``None`` disables it.
      momentum: decay of an optional first moment; ``None`` disables it.
      dtype_momentum: dtype of the first moment buffer.
      weight_decay_rate: optional decoupled weight decay (a schedule is allowed).
      eps: regularisation of the second moment.
      factored: whether to factor the second moment at all.
      weight_decay_mask: a tree of booleans (or a function of the params returning one)
        selecting the leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Shazeer et al, `Adafactor: Adaptive Learning Rates with Sublinear Memory Cost
      <https://arxiv.org/abs/1804.04235>`_, 2018.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.adafactor(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.5987, -1.5822])
    """
    steps = [factorized.scale_by_factored_rms(
        factored, decay_rate, decay_offset, min_dim_size_to_factor, eps)]
    if clipping_threshold is not None:
        steps.append(_clipping.clip_by_block_rms(clipping_threshold))
    if learning_rate is not None:
        steps.append(transform.scale_by_learning_rate(learning_rate, flip_sign=False))
    if multiply_by_parameter_scale:
        steps.append(transform.scale_by_param_block_rms())
    if momentum is not None:
        steps.append(_accumulation.ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
    if weight_decay_rate is not None:
        steps.append(_adding.add_decayed_weights(weight_decay_rate, mask=weight_decay_mask))
    # The sign flip comes last so that weight decay is subtracted as well.
    steps.append(transform.scale(-1))
    return _combining.chain(*steps)


def adagrad(
    learning_rate: base.ScalarOrSchedule,
    initial_accumulator_value: Scalar = 0.1,
    eps: Scalar = 1e-7,
) -> base.GradientTransformationExtraArgs:
    """Adagrad: divides by the root of the running sum of squared gradients.

    Args:
      learning_rate: a fixed step size or a schedule.
      initial_accumulator_value: starting value of the sum of squares.
      eps: added to the sum of squares (inside the square root).

    Returns:
      The optimizer as a gradient transformation.

    References:
      Duchi et al, `Adaptive Subgradient Methods for Online Learning and Stochastic
      Optimization <https://jmlr.org/papers/v12/duchi11a.html>`_, 2011.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.adagrad(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7823, -1.7763])
    """
    return _combining.chain(
        transform.scale_by_rss(initial_accumulator_value=initial_accumulator_value, eps=eps),
        transform.scale_by_learning_rate(learning_rate),
    )


def adam(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    mu_dtype: torch.dtype | None = None,
    *,
    nesterov: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Adam: bias-corrected first moment divided by the root of the bias-corrected second.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root (keeps the gradient of
        the update finite when differentiating through it).
      mu_dtype: dtype of the first moment buffer (``None``: that of the params).
      nesterov: use Nesterov momentum (NAdam).

    Returns:
      The optimizer as a gradient transformation.

    References:
      Kingma et al, `Adam: A Method for Stochastic Optimization
      <https://arxiv.org/abs/1412.6980>`_, 2014.

      Dozat, `Incorporating Nesterov Momentum into Adam
      <https://openreview.net/pdf?id=OM0jvwB8jIp57ZJjtNEZ>`_, 2016.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.adam(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7016, -1.7006])
    """
    return _on_adam_engine(
        adam_engine.AdamHyperParams(b1, b2, eps, eps_root, nesterov, bb.canonical_dtype(mu_dtype)),
        adam_engine.AliasTerms(learning_rate),
        transform.scale_by_learning_rate(learning_rate),
    )


nadam = functools.partial(adam, nesterov=True)
nadam.__doc__ = """NAdam: :func:`adam` with Nesterov momentum (``nesterov=True``).

Takes the arguments of :func:`adam`.

References:
  Dozat, `Incorporating Nesterov Momentum into Adam
  <https://openreview.net/pdf?id=OM0jvwB8jIp57ZJjtNEZ>`_, 2016.

Examples:
  >>> import torch
  >>> import optax_compat as optax
  >>> params = {"w": torch.tensor([1.0, -2.0])}
  >>> opt = optax.nadam(learning_rate=0.1)
  >>> state = opt.init(params)
  >>> for _ in range(3):
  ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
  ...     updates, state = opt.update(grads, state, params)
  ...     params = optax.apply_updates(params, updates)
  >>> params["w"]
  tensor([ 0.6406, -1.6343])
"""


def adamw(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    mu_dtype: torch.dtype | None = None,
    weight_decay: base.ScalarOrSchedule = 1e-4,
    mask: MaskOrFn = None,
    *,
    nesterov: bool = False,
) -> base.GradientTransformationExtraArgs:
    """AdamW: Adam with weight decay decoupled from the adaptive scaling.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      mu_dtype: dtype of the first moment buffer (``None``: that of the params).
      weight_decay: decay strength, multiplied by the learning rate (a schedule is allowed).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed (e.g. to skip biases and norm scales).
      nesterov: use Nesterov momentum (NAdamW).

    Returns:
      The optimizer as a gradient transformation.

    References:
      Loshchilov et al, `Decoupled Weight Decay Regularization
      <https://arxiv.org/abs/1711.05101>`_, 2019.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.adamw(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7016, -1.7006])
    """
    return _on_adam_engine(
        adam_engine.AdamHyperParams(b1, b2, eps, eps_root, nesterov, bb.canonical_dtype(mu_dtype)),
        adam_engine.AliasTerms(learning_rate, weight_decay if mask is None else None),
        _adding.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate),
    )


def _on_adam_engine(hp: adam_engine.AdamHyperParams, terms: adam_engine.AliasTerms,
                    *after_adam: base.GradientTransformation
                    ) -> base.GradientTransformationExtraArgs:
    """``chain(scale_by_adam(hp), *after_adam)`` on the Adam engine (``adam_engine.adam_alias``:
    whole steps on the fused kernel where they apply, the whole in-place step of
    :func:`optax_compat.inplace_step`). The state is the chain's."""
    direction = adam_engine.scale_by_adam(hp, transform.ScaleByAdamState)
    return adam_engine.adam_alias(hp, terms, _combining.chain(direction, *after_adam),
                                  adam_index=0)


nadamw = functools.partial(adamw, nesterov=True)
nadamw.__doc__ = """NAdamW: :func:`adamw` with Nesterov momentum (``nesterov=True``).

Takes the arguments of :func:`adamw`.

References:
  Loshchilov et al, `Decoupled Weight Decay Regularization
  <https://arxiv.org/abs/1711.05101>`_, 2019.

  Dozat, `Incorporating Nesterov Momentum into Adam
  <https://openreview.net/pdf?id=OM0jvwB8jIp57ZJjtNEZ>`_, 2016.

Examples:
  >>> import torch
  >>> import optax_compat as optax
  >>> params = {"w": torch.tensor([1.0, -2.0])}
  >>> opt = optax.nadamw(learning_rate=0.1)
  >>> state = opt.init(params)
  >>> for _ in range(3):
  ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
  ...     updates, state = opt.update(grads, state, params)
  ...     params = optax.apply_updates(params, updates)
  >>> params["w"]
  tensor([ 0.6406, -1.6342])
"""


def adan(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.98,
    b2: Scalar = 0.92,
    b3: Scalar = 0.99,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 1e-8,
    weight_decay: base.ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    """Adan: adaptive Nesterov momentum with a moment of gradient differences.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the gradient moment.
      b2: decay of the gradient-difference moment.
      b3: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      weight_decay: decoupled weight decay strength (a schedule is allowed).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Xie et al, `Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing Deep
      Models <https://arxiv.org/abs/2208.06677>`_, 2022.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.adan(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7007, -1.7002])
    """
    return _combining.chain(
        transform.scale_by_adan(b1=b1, b2=b2, b3=b3, eps=eps, eps_root=eps_root),
        _adding.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate),
    )


def lion(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.99,
    mu_dtype: torch.dtype | None = None,
    weight_decay: base.ScalarOrSchedule = 1e-3,
    mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    """Lion: the sign of an interpolation of momentum and gradient, with decoupled decay.

    Args:
      learning_rate: a fixed step size or a schedule (usually 3-10x smaller than Adam's).
      b1: interpolation factor between momentum and gradient for the update direction.
      b2: decay of the momentum.
      mu_dtype: dtype of the momentum buffer (``None``: that of the params).
      weight_decay: decoupled weight decay strength (a schedule is allowed).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Chen et al, `Symbolic Discovery of Optimization Algorithms
      <https://arxiv.org/abs/2302.06675>`_, 2023.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.lion(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.6997, -1.6994])
    """
    return _combining.chain(
        transform.scale_by_lion(b1=b1, b2=b2, mu_dtype=mu_dtype),
        _adding.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate),
    )


def amsgrad(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    mu_dtype: torch.dtype | None = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
) -> base.GradientTransformationExtraArgs:
    """AMSGrad: Adam whose denominator uses the running maximum of the second moment.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      mu_dtype: dtype of the first moment buffer (``None``: that of the params).
      bias_correction_mu: bias-correct the first moment.
      bias_correction_nu: bias-correct the second moment.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Reddi et al, `On the Convergence of Adam and Beyond
      <https://openreview.net/forum?id=ryQu7f-RZ>`_, 2018.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.amsgrad(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7158, -1.7079])
    """
    return _combining.chain(
        transform.scale_by_amsgrad(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype,
                                   bias_correction_mu=bias_correction_mu,
                                   bias_correction_nu=bias_correction_nu),
        transform.scale_by_learning_rate(learning_rate),
    )


def fromage(
    learning_rate: base.ScalarOrSchedule,
    min_norm: Scalar = 1e-6,
) -> base.GradientTransformationExtraArgs:
    """Fromage: layer-wise trust-ratio steps with a shrink that keeps parameter norms bounded.

    Args:
      learning_rate: a fixed step size or a schedule.
      min_norm: floor on the norms used in the trust ratio.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Bernstein et al, `On the distance between two neural networks and the stability of
      learning <https://arxiv.org/abs/2002.03432>`_, 2020.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.fromage(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7182, -1.4364])
    """
    if callable(learning_rate):
        def shrink(count: Any) -> Any:
            return 1 / (1 + learning_rate(count) ** 2) ** 0.5

        step_size: base.ScalarOrSchedule = lambda count: shrink(count) * learning_rate(count)
        decay: base.ScalarOrSchedule = lambda count: shrink(count) - 1
    else:
        constant_shrink = 1 / (1 + learning_rate ** 2) ** 0.5
        step_size = learning_rate * constant_shrink
        decay = constant_shrink - 1
    return _combining.chain(
        transform.scale_by_trust_ratio(min_norm),
        transform.scale_by_learning_rate(step_size),
        _adding.add_decayed_weights(decay),
    )


def lars(
    learning_rate: base.ScalarOrSchedule,
    weight_decay: base.ScalarOrSchedule = 0.0,
    weight_decay_mask: MaskOrFn = True,
    trust_coefficient: Scalar = 0.001,
    eps: Scalar = 0.0,
    trust_ratio_mask: MaskOrFn = True,
    momentum: Scalar = 0.9,
    nesterov: bool = False,
) -> base.GradientTransformationExtraArgs:
    """LARS: SGD with momentum and a layer-wise trust ratio ``||param|| / ||update||``.

    Args:
      learning_rate: a fixed step size or a schedule.
      weight_decay: L2 penalty added to the gradient before the trust ratio.
      weight_decay_mask: a tree of booleans (or a function of the params returning one)
        selecting the leaves that are decayed; ``True`` decays every leaf.
      trust_coefficient: multiplier of the trust ratio.
      eps: added to the denominator of the trust ratio.
      trust_ratio_mask: like ``weight_decay_mask``, for the leaves that get a trust ratio.
      momentum: decay of the momentum trace.
      nesterov: use Nesterov momentum.

    Returns:
      The optimizer as a gradient transformation.

    References:
      You et al, `Large Batch Training of Convolutional Networks
      <https://arxiv.org/abs/1708.03888>`_, 2017.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.lars(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.9994, -1.9989])
    """
    return _combining.chain(
        _adding.add_decayed_weights(weight_decay, mask=weight_decay_mask),
        _masking.masked(
            inner=transform.scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps),
            mask=trust_ratio_mask,
        ),
        transform.scale_by_learning_rate(learning_rate),
        _accumulation.trace(decay=momentum, nesterov=nesterov),
    )


def lamb(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-6,
    eps_root: Scalar = 0.0,
    weight_decay: base.ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    """LAMB: Adam with decoupled decay, rescaled layer-wise by a trust ratio.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      weight_decay: decoupled weight decay strength (a schedule is allowed).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      You et al, `Large Batch Optimization for Deep Learning: Training BERT in 76 minutes
      <https://arxiv.org/abs/1904.00962>`_, 2020.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.lamb(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.5702, -1.5675])
    """
    return _combining.chain(
        transform.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root),
        _adding.add_decayed_weights(weight_decay=weight_decay, mask=mask),
        transform.scale_by_trust_ratio(),
        transform.scale_by_learning_rate(learning_rate),
    )


def noisy_sgd(
    learning_rate: base.ScalarOrSchedule,
    eta: Scalar = 0.01,
    gamma: Scalar = 0.55,
    key: int | torch.Generator | None = None,
    *,
    seed: int | None = None,
) -> base.GradientTransformationExtraArgs:
    """SGD with annealed Gaussian noise of variance ``eta / (1 + t) ** gamma`` on the gradient.

    Args:
      learning_rate: a fixed step size or a schedule.
      eta: base variance of the noise.
      gamma: decay exponent of the variance.
      key: an int seed or a :class:`torch.Generator` for the noise (Optax's PRNG key).
      seed: deprecated alias of ``key``, as in Optax.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Neelakantan et al, `Adding Gradient Noise Improves Learning for Very Deep Networks
      <https://arxiv.org/abs/1511.06807>`_, 2015.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.noisy_sgd(learning_rate=0.1, key=0)
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"w": 2 * params["w"]}, state)
      >>> updates["w"].shape  # the step plus Gaussian noise of decaying variance
      torch.Size([2])
    """
    return _combining.chain(
        _adding.add_noise(eta, gamma, key, seed=seed),
        transform.scale_by_learning_rate(learning_rate),
    )


def sign_sgd(learning_rate: base.ScalarOrSchedule) -> base.GradientTransformationExtraArgs:
    """SignSGD: steps along the elementwise sign of the gradient.

    Args:
      learning_rate: a fixed step size or a schedule.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Bernstein et al, `signSGD: Compressed Optimisation for Non-Convex Problems
      <https://arxiv.org/abs/1802.04434>`_, 2018.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.sign_sgd(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7000, -1.7000])
    """
    return _combining.chain(
        transform.scale_by_sign(),
        transform.scale_by_learning_rate(learning_rate),
    )


def signum(
    learning_rate: base.ScalarOrSchedule,
    beta: Scalar = 0.9,
    accumulator_dtype: torch.dtype | None = None,
) -> base.GradientTransformationExtraArgs:
    """Signum: steps along the sign of an exponential moving average of the gradient.

    Args:
      learning_rate: a fixed step size or a schedule.
      beta: decay of the moving average.
      accumulator_dtype: dtype of the moving-average buffer (``None``: that of the params).

    Returns:
      The optimizer as a gradient transformation.

    References:
      Bernstein et al, `signSGD: Compressed Optimisation for Non-Convex Problems
      <https://arxiv.org/abs/1802.04434>`_, 2018.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.signum(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7000, -1.7000])
    """
    return _combining.chain(
        _accumulation.ema(beta, debias=False, accumulator_dtype=accumulator_dtype),
        transform.scale_by_sign(),
        transform.scale_by_learning_rate(learning_rate),
    )


def novograd(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.25,
    eps: Scalar = 1e-6,
    eps_root: Scalar = 0.0,
    weight_decay: base.ScalarOrSchedule = 0.0,
) -> base.GradientTransformationExtraArgs:
    """NovoGrad: Adam-like steps with a second moment per layer (a norm) instead of per entry.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the first moment.
      b2: decay of the layer-wise second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      weight_decay: weight decay strength, applied to the normalised gradient.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Ginsburg et al, `Stochastic Gradient Methods with Layer-wise Adaptive Moments for
      Training of Deep Networks <https://arxiv.org/abs/1905.11286>`_, 2019.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.novograd(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7514, -1.5027])
    """
    return _combining.chain(
        transform.scale_by_novograd(b1=b1, b2=b2, eps=eps, eps_root=eps_root,
                                    weight_decay=weight_decay),
        transform.scale_by_learning_rate(learning_rate),
    )


def optimistic_gradient_descent(
    learning_rate: base.ScalarOrSchedule,
    alpha: base.ScalarOrSchedule = 1.0,
    beta: base.ScalarOrSchedule = 1.0,
) -> base.GradientTransformationExtraArgs:
    """Optimistic gradient descent: extrapolates with the previous gradient (for min-max games).

    Args:
      learning_rate: a fixed step size or a schedule.
      alpha: weight of the current gradient (a schedule is allowed).
      beta: weight of the correction ``g_t - g_{t-1}`` (a schedule is allowed).

    Returns:
      The optimizer as a gradient transformation.

    References:
      Mokhtari et al, `A Unified Analysis of Extra-gradient and Optimistic Gradient Methods
      for Saddle Point Problems: Proximal Point Approach
      <https://arxiv.org/abs/1901.08511>`_, 2019.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.optimistic_gradient_descent(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.5680, -1.1360])
    """
    return _combining.chain(
        transform.scale_by_optimistic_gradient(alpha=alpha, beta=beta),
        transform.scale_by_learning_rate(learning_rate),
    )


def optimistic_adam(
    learning_rate: Scalar,
    optimism: Scalar | None = None,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-08,
    eps_root: Scalar = 0.0,
    mu_dtype: torch.dtype | None = None,
    *,
    nesterov: bool = True,
) -> base.GradientTransformationExtraArgs:
    """Optimistic Adam (deprecated in Optax in favour of :func:`optimistic_adam_v2`).

    Args:
      learning_rate: a fixed step size (schedules are rejected, as in Optax).
      optimism: weight of the optimistic correction (``None``: ``learning_rate``).
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      mu_dtype: dtype of the first moment buffer (``None``: that of the params).
      nesterov: use Nesterov momentum.

    Returns:
      The optimizer as a gradient transformation.

    Raises:
      ValueError: if ``learning_rate`` is a schedule.

    References:
      Daskalakis et al, `Training GANs with Optimism <https://arxiv.org/abs/1711.00141>`_,
      2017.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.optimistic_adam(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.6841, -1.6757])
    """
    warnings.warn("`optimistic_adam` is deprecated, please use `optimistic_adam_v2` instead.",
                  category=DeprecationWarning, stacklevel=2)
    if callable(learning_rate):
        raise ValueError("This version of `optimistic_adam` does not support learning rate "
                         "schedules but `optimistic_adam_v2` does.")
    if optimism is None:
        optimism = learning_rate
    return _combining.chain(
        transform.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype,
                                nesterov=nesterov),
        transform.scale_by_optimistic_gradient(alpha=learning_rate, beta=optimism),
        # The step size is already in ``alpha``; this only flips the sign.
        transform.scale_by_learning_rate(1.0),
    )


def optimistic_adam_v2(
    learning_rate: base.ScalarOrSchedule,
    *,
    alpha: Scalar = 1.0,
    beta: Scalar = 1.0,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-08,
    eps_root: Scalar = 0.0,
    mu_dtype: torch.dtype | None = None,
    nesterov: bool = True,
) -> base.GradientTransformationExtraArgs:
    """Optimistic Adam: Adam directions combined by optimistic gradient descent.

    Args:
      learning_rate: a fixed step size or a schedule.
      alpha: weight of the current Adam direction.
      beta: weight of the optimistic correction.
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      mu_dtype: dtype of the first moment buffer (``None``: that of the params).
      nesterov: use Nesterov momentum.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Daskalakis et al, `Training GANs with Optimism <https://arxiv.org/abs/1711.00141>`_,
      2017.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.optimistic_adam_v2(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.6841, -1.6757])
    """
    return _combining.chain(
        transform.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype,
                                nesterov=nesterov),
        transform.scale_by_optimistic_gradient(alpha=alpha, beta=beta),
        transform.scale_by_learning_rate(learning_rate),
    )


def radam(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    eps_root: Scalar = 0.0,
    threshold: Scalar = 5.0,
    *,
    nesterov: bool = False,
) -> base.GradientTransformationExtraArgs:
    """RAdam: Adam with the adaptive term switched on once its variance is tractable.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      threshold: length of the approximated simple moving average above which the
        rectified adaptive step is used.
      nesterov: use Nesterov momentum.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Liu et al, `On the Variance of the Adaptive Learning Rate and Beyond
      <https://arxiv.org/abs/1908.03265>`_, 2020.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.radam(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.4623, -0.9246])
    """
    return _combining.chain(
        transform.scale_by_radam(b1=b1, b2=b2, eps=eps, eps_root=eps_root,
                                 threshold=threshold, nesterov=nesterov),
        transform.scale_by_learning_rate(learning_rate),
    )


def rmsprop(
    learning_rate: base.ScalarOrSchedule,
    decay: Scalar = 0.9,
    eps: Scalar = 1e-8,
    initial_scale: Scalar = 0.0,
    eps_in_sqrt: bool = True,
    centered: bool = False,
    momentum: Scalar | None = None,
    nesterov: bool = False,
    bias_correction: bool = False,
) -> base.GradientTransformationExtraArgs:
    """RMSProp: divides by the root of a moving average of squared gradients.

    Args:
      learning_rate: a fixed step size or a schedule.
      decay: decay of the moving average.
      eps: regularisation of the denominator.
      initial_scale: starting value of the moving average.
      eps_in_sqrt: add ``eps`` inside the square root (else outside).
      centered: subtract the squared moving average of the gradient (a variance estimate).
      momentum: decay of an optional momentum trace applied after scaling.
      nesterov: use Nesterov momentum in that trace.
      bias_correction: bias-correct the moving averages.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Hinton, `Overview of mini-batch gradient descent
      <www.cs.toronto.edu/~tijmen/csc321/slides/lecture_slides_lec6.pdf>`_, 2012.

      Graves, `Generating Sequences With Recurrent Neural Networks
      <https://arxiv.org/abs/1308.0850>`_, 2014.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.rmsprop(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.3692, -1.3087])
    """
    scale_by_moments = transform.scale_by_stddev if centered else transform.scale_by_rms
    return _combining.chain(
        scale_by_moments(decay=decay, eps=eps, initial_scale=initial_scale,
                         eps_in_sqrt=eps_in_sqrt, bias_correction=bias_correction),
        transform.scale_by_learning_rate(learning_rate),
        (_accumulation.trace(decay=momentum, nesterov=nesterov)
         if momentum is not None else base.identity()),
    )


def sgd(
    learning_rate: base.ScalarOrSchedule,
    momentum: Scalar | None = None,
    nesterov: bool = False,
    accumulator_dtype: torch.dtype | None = None,
) -> base.GradientTransformationExtraArgs:
    """Stochastic gradient descent, with optional (Nesterov) momentum.

    Args:
      learning_rate: a fixed step size or a schedule.
      momentum: decay of the momentum trace; ``None`` disables momentum.
      nesterov: use Nesterov momentum.
      accumulator_dtype: dtype of the momentum buffer (``None``: that of the params).

    Returns:
      The optimizer as a gradient transformation.

    References:
      Sutskever et al, `On the importance of initialization and momentum in deep learning
      <http://proceedings.mlr.press/v28/sutskever13.pdf>`_, 2013.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.sgd(learning_rate=0.1, momentum=0.9)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.0620, -0.1240])
    """
    momentum_step = (
        _accumulation.trace(decay=momentum, nesterov=nesterov,
                            accumulator_dtype=accumulator_dtype)
        if momentum is not None else base.identity())
    tx = _combining.chain(
        momentum_step,
        transform.scale_by_learning_rate(learning_rate),
    )
    if momentum is not None and not callable(learning_rate) and accumulator_dtype is None:
        bb.declare(tx.update, whole_step=bb.tolerates_none_step(
            momentum_step_module.sgd_step(tx, learning_rate, momentum, nesterov)),
            whole_step_reads_grads_in_place=momentum_step_module.on_the_kernel(
                learning_rate, momentum))
    return tx


def sm3(
    learning_rate: Scalar,
    momentum: Scalar = 0.9,
) -> base.GradientTransformationExtraArgs:
    """SM3: memory-efficient adaptive steps from accumulators shared along tensor axes.

    Args:
      learning_rate: a fixed step size (schedules are not supported, as in Optax).
      momentum: decay of the momentum.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Anil et al, `Memory-Efficient Adaptive Optimization
      <https://arxiv.org/abs/1901.11150>`_, 2019.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.sm3(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.9538, -1.9538])
    """
    return _combining.chain(
        transform.scale_by_sm3(momentum),
        transform.scale(-learning_rate),
    )


def yogi(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-3,
) -> base.GradientTransformationExtraArgs:
    """Yogi: Adam with an additive, sign-controlled second-moment update.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the first moment.
      b2: rate of the second-moment update.
      eps: added to the denominator outside the square root.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Zaheer et al, `Adaptive Methods for Nonconvex Optimization
      <https://proceedings.neurips.cc/paper/2018/file/90365351ccc7437a1309dc64e4db32a3-Paper.pdf>`_,
      2018.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.yogi(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7019, -1.7008])
    """
    return _combining.chain(
        transform.scale_by_yogi(b1=b1, b2=b2, eps=eps),
        transform.scale_by_learning_rate(learning_rate),
    )


def adamax(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
) -> base.GradientTransformationExtraArgs:
    """AdaMax: Adam with the infinity norm in place of the second moment.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the first moment.
      b2: decay of the infinity norm.
      eps: added to the denominator.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Kingma et al, `Adam: A Method for Stochastic Optimization
      <https://arxiv.org/abs/1412.6980>`_, 2014.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.adamax(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7155, -1.7076])
    """
    return _combining.chain(
        transform.scale_by_adamax(b1=b1, b2=b2, eps=eps),
        transform.scale_by_learning_rate(learning_rate),
    )


def adamaxw(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    weight_decay: base.ScalarOrSchedule = 1e-4,
    mask: MaskOrFn = None,
) -> base.GradientTransformationExtraArgs:
    """AdaMaxW: :func:`adamax` with decoupled weight decay.

    Args:
      learning_rate: a fixed step size or a schedule.
      b1: decay of the first moment.
      b2: decay of the infinity norm.
      eps: added to the denominator.
      weight_decay: decoupled weight decay strength (a schedule is allowed).
      mask: a tree of booleans (or a function of the params returning one) selecting the
        leaves that are decayed.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Loshchilov et al, `Decoupled Weight Decay Regularization
      <https://arxiv.org/abs/1711.05101>`_, 2019.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.adamaxw(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7155, -1.7076])
    """
    return _combining.chain(
        transform.scale_by_adamax(b1=b1, b2=b2, eps=eps),
        _adding.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate),
    )


def rprop(
    learning_rate: Scalar,
    eta_minus: Scalar = 0.5,
    eta_plus: Scalar = 1.2,
    min_step_size: Scalar = 1e-6,
    max_step_size: Scalar = 50.0,
) -> base.GradientTransformationExtraArgs:
    """Rprop: per-coordinate step sizes grown or shrunk by the agreement of gradient signs.

    Args:
      learning_rate: the initial step size of every coordinate.
      eta_minus: shrink factor when the gradient changes sign.
      eta_plus: growth factor when it keeps its sign.
      min_step_size: lower bound of the step sizes.
      max_step_size: upper bound of the step sizes.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Riedmiller et al, `A direct adaptive method for faster backpropagation learning: the
      RPROP algorithm <https://ieeexplore.ieee.org/document/298623>`_, 1993.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.rprop(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     grads = {"w": 2 * params["w"]}  # gradient of sum(w ** 2)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.7800, -1.7800])
    """
    return _combining.chain(
        transform.scale_by_rprop(learning_rate=learning_rate, eta_minus=eta_minus,
                                 eta_plus=eta_plus, min_step_size=min_step_size,
                                 max_step_size=max_step_size),
        transform.scale(-1.0),
    )


def polyak_sgd(
    max_learning_rate: Scalar = 1.0,
    scaling: base.ScalarOrSchedule = 1.0,
    f_min: Scalar = 0.0,
    eps: Scalar = 0.0,
    variant: str = "sps",
) -> base.GradientTransformationExtraArgs:
    """SGD with Polyak's step size ``(f(x) - f_min) / ||g||^2``, capped at a maximum.

    ``update`` takes the current objective as the keyword-only argument ``value``.

    Args:
      max_learning_rate: upper bound of the step size.
      scaling: a step size or schedule multiplying the gradient before the Polyak step.
      f_min: a lower bound of the objective.
      eps: added to the squared gradient norm.
      variant: ``"sps"`` or ``"sps+"`` (the latter clips a negative gap at zero).

    Returns:
      The optimizer as a gradient transformation.

    References:
      Loizou et al, `Stochastic Polyak step-size for SGD: An adaptive learning rate for fast
      convergence <https://arxiv.org/abs/2002.10542>`_, 2021.

      Berrada et al, `Training neural networks for and by interpolation
      <https://arxiv.org/abs/1906.05661>`_, 2020.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.polyak_sgd(max_learning_rate=1.0)
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     value = (params["w"] ** 2).sum()
      ...     grads = {"w": 2 * params["w"]}
      ...     updates, state = opt.update(grads, state, params, value=value)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 0.1250, -0.2500])
    """
    return _combining.chain(
        sgd(learning_rate=scaling),
        transform.scale_by_polyak(max_learning_rate=max_learning_rate, f_min=f_min, eps=eps,
                                  variant=variant),
    )


def lbfgs(
    learning_rate: base.ScalarOrSchedule | None = None,
    memory_size: int = 10,
    scale_init_precond: bool = True,
    linesearch: base.GradientTransformationExtraArgs | base.GradientTransformation | None = (
        _linesearch.scale_by_zoom_linesearch(max_linesearch_steps=20,
                                             initial_guess_strategy="one")),
) -> base.GradientTransformationExtraArgs:
    r"""L-BFGS: a quasi-Newton direction (:func:`scale_by_lbfgs`) scaled by a line search.

    The updates are :math:`-\eta_k P_k g_k` with :math:`P_k` the limited-memory BFGS
    approximation of the inverse Hessian and :math:`\eta_k` the step size found by
    ``linesearch`` (by default a zoom line search satisfying the strong Wolfe conditions,
    starting from 1). ``update`` then needs the keyword arguments ``value``, ``grad`` and
    ``value_fn`` of the line search; for a deterministic objective,
    :func:`value_and_grad_from_state` reuses the value and gradient the line search computed.

    Args:
      learning_rate: an optional fixed step size or schedule applied before the line search
        (by default the line search alone sets the step size).
      memory_size: number of past parameter/gradient differences kept.
      scale_init_precond: scale the initial identity preconditioner by
        :math:`\langle \delta w, \delta g\rangle / \|\delta g\|^2`.
      linesearch: a line search such as :func:`scale_by_zoom_linesearch`, or ``None`` for
        none.

    Returns:
      The optimizer as a gradient transformation (memory intensive: best for small and
      medium problems).

    References:
      Algorithms 7.4 and 7.5 of Nocedal and Wright, `Numerical Optimization
      <https://doi.org/10.1007/978-0-387-40065-5>`_, 1999.

      Liu and Nocedal, `On the limited memory BFGS method for large scale optimization
      <https://doi.org/10.1007/BF01589116>`_, 1989.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> def loss(params):
      ...     return ((params["w"] - torch.tensor([3.0, -1.0])) ** 2).sum()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.lbfgs()
      >>> state = opt.init(params)
      >>> value_and_grad = optax.value_and_grad_from_state(loss)
      >>> for _ in range(3):
      ...     value, grads = value_and_grad(params, state=state)
      ...     updates, state = opt.update(grads, state, params, value=value, grad=grads,
      ...                                 value_fn=loss)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]
      tensor([ 3., -1.])
    """
    if learning_rate is None:
        base_scaling = transform.scale(-1.0)
    else:
        base_scaling = transform.scale_by_learning_rate(learning_rate)
    if linesearch is None:
        linesearch = base.identity()
    return _combining.chain(
        scale_by_lbfgs(memory_size=memory_size, scale_init_precond=scale_init_precond),
        base_scaling,
        linesearch,
    )
