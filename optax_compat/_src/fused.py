"""In-place Adam/AdamW steps on PyTorch's fused kernels, on the state of the pure aliases.

:func:`optax_compat.adam` and :func:`optax_compat.adamw` are pure: every step allocates new
moments and updates, which is what makes them differentiable. When nothing needs to be
differentiated, a whole step (moments, bias correction, weight decay and the parameter update)
can instead run in one pass per tensor with ``torch._fused_adam_`` / ``torch._fused_adamw_``,
writing into the parameters and the state buffers. This module provides that path for the
*same* optimizers: :func:`adam` and :func:`adamw` here take the aliases' arguments, their
``init`` is the alias's ``init`` (the states are interchangeable), and their ``step`` mutates
``params`` and ``state`` in place.

The numbers are those of the pure aliases up to rounding: the kernel forms the bias corrections
``1 - b ** t`` in float64 where the pure path (like Optax) uses the params' dtype, so in float32
each update may differ by up to about 1e-5 relative (``1 - 0.999 ** t`` loses digits for small
``t``); in float64 the paths agree to about 1e-13. The tests compare params and state over six
steps of size 0.1 with ``rtol=1e-5, atol=1e-5`` (float32) and ``rtol=1e-10`` (float64).

Limits (checked when the optimizer is built): ``eps_root`` must be 0 and ``nesterov`` False,
and ``b1``, ``b2`` and ``eps`` must be Python numbers; the first moment must have the params'
dtype (``mu_dtype=None``). Nothing here has a backward: use the aliases for meta-gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import optree
import torch

from optax_compat._src import alias, base, numerics
from optax_compat._src import building_blocks as bb
from optax_compat._src.building_blocks import tree_math

Scalar = float | torch.Tensor
StepFn = Callable[[base.Params, base.Updates, base.OptState], base.OptState]


class FusedOptimizer(NamedTuple):
    """An optimizer that updates parameters in place.

    Attributes:
      init: ``init(params) -> state``, the same state as the matching pure alias.
      step: ``step(params, grads, state) -> state``: applies one optimizer step by writing into
        ``params`` and the buffers of ``state`` (which is returned, mutated). ``grads`` are
        only read; a ``None`` gradient leaves its parameter and state entries untouched.
    """

    init: base.TransformInitFn
    step: StepFn


def _tolerating_none(step: StepFn) -> StepFn:
    """``step`` on the parameters whose gradient is not ``None`` (see ``bb.none_gradients``)."""

    def step_present(params: base.Params, grads: base.Updates,
                     state: base.OptState) -> base.OptState:
        plan = bb.pruning(grads)
        if plan is None:
            return step(params, grads, state)
        hidden_params, hidden_state = plan.params(params), plan.state(state)
        if hidden_params is params and not plan.state_hidden:  # only Optax's empty subtrees
            return step(params, grads, state)
        return plan.restore(state, step(hidden_params, grads, hidden_state))

    return step_present


def adam(
    learning_rate: base.ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: torch.dtype | None = None,
    *,
    nesterov: bool = False,
) -> FusedOptimizer:
    """The in-place counterpart of :func:`optax_compat.adam` (same arguments and state).

    Args:
      learning_rate: a fixed step size, a 0-d tensor, or a schedule of the step count.
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: must be 0 (the fused kernel has no such term).
      mu_dtype: must be ``None`` or the params' dtype.
      nesterov: must be False.

    Returns:
      A :class:`FusedOptimizer` whose state is that of ``optax_compat.adam`` with the same
      arguments.

    Raises:
      ValueError: for an option the fused kernel cannot express.
    """
    _check_supported(learning_rate, b1, b2, eps, eps_root, nesterov)
    pure = alias.adam(learning_rate, b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov)

    def step(params: base.Params, grads: base.Updates, state: base.OptState) -> base.OptState:
        adam_state, lr_state = state
        buffers = _Buffers.of(params, grads, adam_state, mask=None)
        lr = _schedule_value(learning_rate, lr_state)
        buffers.step(adam_state.count, lr, b1, b2, eps, weight_decay=0.0)
        return state

    return FusedOptimizer(pure.init, _tolerating_none(step))


def adamw(
    learning_rate: base.ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: torch.dtype | None = None,
    weight_decay: base.ScalarOrSchedule = 1e-4,
    mask: alias.MaskOrFn = None,
    *,
    nesterov: bool = False,
) -> FusedOptimizer:
    """The in-place counterpart of :func:`optax_compat.adamw` (same arguments and state).

    Args:
      learning_rate: a fixed step size, a 0-d tensor, or a schedule of the step count.
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: must be 0 (the fused kernel has no such term).
      mu_dtype: must be ``None`` or the params' dtype.
      weight_decay: decoupled weight decay, a number, 0-d tensor or schedule.
      mask: a tree of booleans (or a function of the params returning one, or a prefix of
        the params tree) selecting the decayed leaves.
      nesterov: must be False.

    Returns:
      A :class:`FusedOptimizer` whose state is that of ``optax_compat.adamw`` with the same
      arguments.

    Raises:
      ValueError: for an option the fused kernel cannot express.
    """
    _check_supported(learning_rate, b1, b2, eps, eps_root, nesterov)
    pure = alias.adamw(learning_rate, b1, b2, eps, eps_root, mu_dtype, weight_decay, mask,
                       nesterov=nesterov)

    def step(params: base.Params, grads: base.Updates, state: base.OptState) -> base.OptState:
        adam_state, decay_state, lr_state = state
        buffers = _Buffers.of(params, grads, adam_state, mask=mask)
        lr = _schedule_value(learning_rate, lr_state)
        # A masked decay keeps its own state one level down, in ``inner_state``.
        decay = _schedule_value(weight_decay, getattr(decay_state, "inner_state", decay_state))
        buffers.step(adam_state.count, lr, b1, b2, eps, weight_decay=decay)
        return state

    return FusedOptimizer(pure.init, _tolerating_none(step))


def _check_supported(learning_rate: Any, b1: Any, b2: Any, eps: Any, eps_root: Any,
                     nesterov: bool) -> None:
    if learning_rate is None:
        raise ValueError("The fused Adam step needs a learning rate, got None.")
    if nesterov:
        raise ValueError("The fused Adam kernel has no Nesterov variant: use nesterov=False "
                         "or the pure alias.")
    if not bb.is_zero(eps_root):
        raise ValueError(f"The fused Adam kernel has no eps_root term, got eps_root={eps_root!r}; "
                         "use the pure alias.")
    for name, value in (("b1", b1), ("b2", b2), ("eps", eps)):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"The fused Adam kernel takes {name} as a Python number, "
                             f"got {type(value).__name__}.")


def _advance(counter: torch.Tensor) -> None:
    """Increments an int32 step counter in place, saturating as ``numerics.safe_increment``."""
    counter.copy_(numerics.safe_increment(counter))


def _schedule_value(value: base.ScalarOrSchedule, counter_state: Any) -> Scalar:
    """The value of a constant or schedule at this step; advances the schedule's counter."""
    if not callable(value):
        return value
    current = value(counter_state.count)
    _advance(counter_state.count)
    return current


def _mask_leaves(mask: alias.MaskOrFn, params: base.Params, count: int) -> list[bool]:
    """One boolean per params leaf: whether it is decayed (``mask`` may be a tree prefix)."""
    if mask is None:
        return [True] * count
    mask_tree = mask(params) if callable(mask) else mask
    full = optree.tree_broadcast_prefix(mask_tree, params, none_is_leaf=tree_math.NONE_IS_LEAF,
                                        namespace=tree_math.NAMESPACE)
    return [bool(flag) for flag in tree_math.leaves(full)]


class _Buffers(NamedTuple):
    """The leaves one fused step reads and writes, checked before anything is modified."""

    params: list[torch.Tensor]
    grads: list[torch.Tensor]
    mu: list[torch.Tensor]
    nu: list[torch.Tensor]
    decayed: list[bool]

    @classmethod
    def of(cls, params: base.Params, grads: base.Updates, adam_state: Any,
           mask: alias.MaskOrFn) -> _Buffers:
        param_leaves, spec = tree_math.flatten(params)
        grad_leaves = tree_math.leaves_like(grads, spec, "grads", params)
        mu_leaves = tree_math.leaves_like(adam_state.mu, spec, "state.mu", params)
        nu_leaves = tree_math.leaves_like(adam_state.nu, spec, "state.nu", params)
        for param, mu in zip(param_leaves, mu_leaves, strict=True):
            if mu.dtype != param.dtype:
                raise ValueError(f"The fused Adam kernel needs moments of the params' dtype, "
                                 f"got {mu.dtype} for a {param.dtype} parameter; use the pure "
                                 "alias.")
        return cls(param_leaves, grad_leaves, mu_leaves, nu_leaves,
                   _mask_leaves(mask, params, len(param_leaves)))

    def step(self, count: torch.Tensor, lr: Scalar, b1: float, b2: float, eps: float, *,
             weight_decay: Scalar) -> None:
        """Advances ``count`` and runs the kernel, writing params, ``mu`` and ``nu``."""
        for value in (lr, weight_decay):
            if isinstance(value, torch.Tensor) and value.requires_grad:
                raise ValueError("The fused Adam step has no backward; use the pure alias to "
                                 "differentiate with respect to hyperparameters.")
        _advance(count)
        everything = list(range(len(self.params)))
        if bb.is_zero(weight_decay) or not any(self.decayed):
            groups = [(everything, 0.0)]
        elif isinstance(weight_decay, torch.Tensor):
            # The kernel takes the decay as a Python number; a tensor (a schedule's value) is
            # applied here as the kernel would apply it: ``p *= 1 - lr * wd`` before the step.
            # Schedules return float32 values: form the factor in float64, as the pure path
            # multiplies them into the (possibly float64) updates separately.
            decayed = [p for p, flag in zip(self.params, self.decayed, strict=True) if flag]
            factor = 1 - torch.as_tensor(lr, dtype=torch.float64) * weight_decay.double()
            torch._foreach_mul_(decayed, factor.to(decayed[0].device))
            groups = [(everything, 0.0)]
        else:
            groups = [([i for i in everything if self.decayed[i]], float(weight_decay)),
                      ([i for i in everything if not self.decayed[i]], 0.0)]
        for indices, decay in groups:
            by_device: dict[torch.device, list[int]] = {}
            for i in indices:
                by_device.setdefault(self.params[i].device, []).append(i)
            for device, members in by_device.items():
                torch._fused_adamw_(
                    [self.params[i] for i in members], [self.grads[i] for i in members],
                    [self.mu[i] for i in members], [self.nu[i] for i in members], [],
                    [count.to(device)] * len(members),
                    lr=lr.to(device) if isinstance(lr, torch.Tensor) else lr,
                    beta1=b1, beta2=b2, weight_decay=decay, eps=eps, amsgrad=False,
                    maximize=False)
