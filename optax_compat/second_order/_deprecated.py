"""Second-order utilities kept for compatibility (mirrors ``optax/second_order/_deprecated.py``).

Optax deprecated these in 0.2.7 (removal planned in 0.2.9); they warn as Optax's do. Where
Optax composes ``jax.jvp`` and ``jax.grad`` these compose ``torch.func.jvp`` and
``torch.func.grad`` (forward over reverse), so ``loss`` must be a function that
``torch.func`` can transform (pure, no ``.item()`` or in-place writes into its parameters);
``torch.func.functional_call`` turns an ``nn.Module`` into such a function.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import torch

from optax_compat._runtime import tree_math as tm


class LossFn(Protocol):
    """A loss function to be optimized: ``loss(params, inputs, targets) -> 0-d tensor``."""

    @abc.abstractmethod
    def __call__(self, params: Any, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        ...


def _warn_deprecated(name: str) -> None:
    warnings.warn(f"The function {name} is deprecated. This function will be/was removed in "
                  "optax 0.2.9.", DeprecationWarning, stacklevel=3)


def _gradient_of_leaves(loss: LossFn, params: Any, inputs: torch.Tensor,
                        targets: torch.Tensor) -> tuple[Callable[..., Any], tm.Leaves, Any]:
    """The gradient of ``loss`` as a function of the leaves of ``params``, with those leaves."""
    leaves, spec = tm.float_leaves(params, "params")

    def loss_of_leaves(*leaves: torch.Tensor) -> torch.Tensor:
        return loss(tm.unflatten(spec, leaves), inputs, targets)

    return torch.func.grad(loss_of_leaves, argnums=tuple(range(len(leaves)))), leaves, spec


def _hessian_vector_product(loss: LossFn, v: torch.Tensor, params: Any, inputs: torch.Tensor,
                            targets: torch.Tensor) -> Any:
    gradient, leaves, spec = _gradient_of_leaves(loss, params, inputs, targets)
    tangents = tm.unravel(v, leaves)
    _, product = torch.func.jvp(gradient, tuple(leaves), tuple(tangents))
    return tm.unflatten(spec, list(product))


def hvp(loss: LossFn, v: torch.Tensor, params: Any, inputs: torch.Tensor,
        targets: torch.Tensor) -> Any:
    """Hessian-vector product of ``loss`` at ``(params, inputs, targets)``.

    .. deprecated:: Optax 0.2.7, to be removed in 0.2.9.

    Args:
      loss: the loss function ``loss(params, inputs, targets)``.
      v: a vector with as many elements as all leaves of ``params`` together, in their
        flattening order (as ``ravel_pytree`` orders them).
      params: model parameters, a tree of floating-point tensors.
      inputs: inputs at which ``loss`` is evaluated.
      targets: targets at which ``loss`` is evaluated.

    Returns:
      The product of the Hessian of ``loss`` with ``v``, as a tree shaped like ``params``
      (Optax returns this tree too).
    """
    _warn_deprecated("hvp")
    return _hessian_vector_product(loss, v, params, inputs, targets)


def hessian_diag(loss: LossFn, params: Any, inputs: torch.Tensor,
                 targets: torch.Tensor) -> torch.Tensor:
    """The diagonal of the Hessian of ``loss`` at ``(params, inputs, targets)``.

    Computed as Optax does, with one Hessian-vector product per basis vector (vectorised
    with ``torch.func.vmap``): the cost is that of ``n`` gradients for ``n`` parameters.

    .. deprecated:: Optax 0.2.7, to be removed in 0.2.9.

    Args:
      loss: the loss function ``loss(params, inputs, targets)``.
      params: model parameters, a tree of floating-point tensors.
      inputs: inputs at which ``loss`` is evaluated.
      targets: targets at which ``loss`` is evaluated.

    Returns:
      A vector with the diagonal, in the flattening order of the leaves of ``params``.
    """
    _warn_deprecated("hessian_diag")
    flat_params = tm.ravel(tm.float_leaves(params, "params")[0])
    basis = torch.eye(flat_params.shape[0], dtype=flat_params.dtype, device=flat_params.device)

    def diagonal_entry(v: torch.Tensor) -> torch.Tensor:
        product = _hessian_vector_product(loss, v, params, inputs, targets)
        return torch.dot(v, tm.ravel(tm.leaves(product)))

    return torch.func.vmap(diagonal_entry)(basis)


def fisher_diag(negative_log_likelihood: LossFn, params: Any, inputs: torch.Tensor,
                targets: torch.Tensor) -> torch.Tensor:
    """The diagonal of the observed Fisher information: the squared gradient of the loss.

    .. deprecated:: Optax 0.2.7, to be removed in 0.2.9.

    Args:
      negative_log_likelihood: the negative log likelihood
        ``negative_log_likelihood(params, inputs, targets)``.
      params: model parameters, a tree of floating-point tensors.
      inputs: inputs at which ``negative_log_likelihood`` is evaluated.
      targets: targets at which ``negative_log_likelihood`` is evaluated.

    Returns:
      A vector with the squared gradient, in the flattening order of the leaves of ``params``.
    """
    _warn_deprecated("fisher_diag")
    gradient, leaves, _ = _gradient_of_leaves(negative_log_likelihood, params, inputs, targets)
    return torch.square(tm.ravel(list(gradient(*leaves))))
