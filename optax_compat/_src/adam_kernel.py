"""Pure :func:`optax_compat.adam`/``adamw`` steps on PyTorch's fused Adam kernel, when it applies.

``adam`` is ``chain(scale_by_adam(...), scale_by_learning_rate(lr))`` (``adamw`` adds
``add_decayed_weights`` in between; its term ``-lr * wd * params`` is one more in-place pass).
Evaluated transform by transform, a step makes about ten passes over memory; the kernel one. The
step stays pure: the kernel writes into *fresh copies* of the moments and into a zeroed buffer
that becomes the updates (``-lr * direction``, the kernel's "parameter" starting at zero);
nothing passed in is modified, and the state has the chain's exact structure and types.

Matching Optax's numbers: the kernel forms the bias corrections ``c = 1 - b ** t`` in float64,
Optax in the leaves' precision (``1 - 0.999 ** t`` in float32 is off by up to ~1e-5 for small
``t``). The kernel's scalars are therefore rescaled so that it evaluates Optax's expression
``(m / c1) / (sqrt(v / c2) + eps)`` with Optax's ``c1``, ``c2``: with ``s = sqrt(c2)``,

    lr' = lr * c1_kernel * s_optax / (s_kernel * c1_optax),   eps' = eps * s_optax / s_kernel.

The remaining differences are the rounding of a different order of operations (~1e-7 in
float32, ~1e-16 in float64). Reading the step count for these scalars is a host read, which is
why the path is limited to CPU tensors (where the kernel reads it anyway).

The path applies when: every leaf is a CPU float32 or float64 tensor of one dtype, the moments
have that dtype, autograd records nothing (no ``requires_grad`` leaf or learning rate), the
hyperparameters are Python numbers, ``eps_root == 0`` and ``nesterov`` is off, AdamW's decay
is an unmasked constant (its params are then CPU tensors of that dtype too), ``inplace`` is not
requested, and the code is not being traced by ``torch.compile``. Otherwise the chain runs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from optax_compat._src import base, numerics
from optax_compat._src import building_blocks as bb
from optax_compat._src.building_blocks import tree_math

_INT32_MAX = 2 ** 31 - 1
_DTYPES = (torch.float32, torch.float64)


def applies(b1: Any, b2: Any, eps: Any, eps_root: Any, mu_dtype: Any, nesterov: bool,
            weight_decay: Any = 0.0, mask: Any = None) -> bool:
    """Whether an ``adam``/``adamw`` alias with these arguments can use the kernel (when its
    inputs can): plain numbers, no ``eps_root``, ``mu_dtype`` or Nesterov, an unmasked
    constant weight decay."""
    numbers = all(isinstance(h, (int, float)) and not isinstance(h, bool)
                  for h in (b1, b2, eps, weight_decay))
    return (numbers and bb.is_zero(eps_root) and mu_dtype is None and not nesterov
            and mask is None)


def with_kernel_step(chain: base.GradientTransformationExtraArgs,
                     learning_rate: base.ScalarOrSchedule, b1: float, b2: float, eps: float,
                     weight_decay: float = 0.0) -> base.GradientTransformationExtraArgs:
    """The ``adam``/``adamw`` chain with an ``update`` that runs the fused kernel when it can.

    Args:
      chain: ``chain(scale_by_adam(b1, b2, eps), scale_by_learning_rate(learning_rate))``, or
        for AdamW the same with ``add_decayed_weights(weight_decay)`` (unmasked) in between.
      learning_rate: the alias's learning rate (a number, 0-d tensor or schedule).
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      weight_decay: AdamW's constant decay (0 for Adam).

    Returns:
      A transformation with ``chain``'s ``init`` and state, and the same updates.
    """

    @bb.supports_inplace

    def update_fn(updates: base.Updates, state: Any, params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, Any]:
        if not extra_args.get("inplace", False):
            result = _kernel_step(updates, state, params, learning_rate, b1, b2, eps,
                                  weight_decay)
            if result is not None:
                return result
        return chain.update(updates, state, params, **extra_args)

    return base.GradientTransformationExtraArgs(chain.init, update_fn)


def _kernel_step(updates: base.Updates, state: Any, params: base.Params | None,
                 learning_rate: base.ScalarOrSchedule, b1: float, b2: float, eps: float,
                 weight_decay: float) -> tuple[base.Updates, Any] | None:
    """The step on the kernel, or ``None`` when it does not apply (the chain then runs)."""
    decays = not bb.is_zero(weight_decay)
    if torch.compiler.is_compiling() or (decays and params is None):
        return None
    adam_state, lr_state = state[0], state[-1]
    grads, spec = tree_math.flatten(updates)
    if not grads or not _plain_cpu_leaves(grads, grads[0].dtype):
        return None
    dtype = grads[0].dtype
    mus = tree_math.leaves_like(adam_state.mu, spec, "state.mu", updates)
    nus = tree_math.leaves_like(adam_state.nu, spec, "state.nu", updates)
    param_leaves = tree_math.leaves_like(params, spec, "params", updates) if decays else []
    if not all(_plain_cpu_leaves(group, dtype) for group in (mus, nus, param_leaves)):
        return None
    count = adam_state.count
    step = int(count) + 1
    if tree_math.is_recording(grads, mus, nus, param_leaves) or step > _INT32_MAX:
        return None
    lr = learning_rate(lr_state.count) if callable(learning_rate) else learning_rate
    if isinstance(lr, torch.Tensor) and (lr.requires_grad or lr.device.type != "cpu"):
        return None

    # Optax multiplies by the learning rate (and forms its corrections) in the leaves' dtype.
    lr_value = float(torch.as_tensor(lr, dtype=dtype))
    optax_step = torch.tensor(step, dtype=dtype)
    c1_optax = float(1 - b1 ** optax_step)
    s_optax = math.sqrt(float(1 - b2 ** optax_step))
    c1_kernel = 1 - b1 ** step
    s_kernel = math.sqrt(1 - b2 ** step)

    new_count = numerics.safe_increment(count)
    scaled = [torch.zeros_like(g) for g in grads]
    new_mus = [mu.clone() for mu in mus]
    new_nus = [nu.clone() for nu in nus]
    torch._fused_adam_(scaled, grads, new_mus, new_nus, [], [new_count] * len(grads),
                       lr=lr_value * c1_kernel * s_optax / (s_kernel * c1_optax),
                       beta1=b1, beta2=b2, weight_decay=0.0, eps=eps * s_optax / s_kernel,
                       amsgrad=False, maximize=False)
    if decays:  # AdamW: -lr * (direction + weight_decay * params)
        torch._foreach_add_(scaled, param_leaves, alpha=-lr_value * weight_decay)
    new_lr_state = (type(lr_state)(count=numerics.safe_increment(lr_state.count))
                    if callable(learning_rate) else lr_state)
    new_adam_state = type(adam_state)(count=new_count, mu=tree_math.unflatten(spec, new_mus),
                                      nu=tree_math.unflatten(spec, new_nus))
    return tree_math.unflatten(spec, scaled), (new_adam_state, *state[1:-1], new_lr_state)


def _plain_cpu_leaves(leaves: list[Any], dtype: torch.dtype) -> bool:
    # ``is_cpu`` rather than ``device.type``: this runs over every leaf at every step.
    return dtype in _DTYPES and all(
        isinstance(x, torch.Tensor) and x.dtype == dtype and x.is_cpu for x in leaves)
