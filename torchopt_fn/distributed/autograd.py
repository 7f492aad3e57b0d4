"""Distributed autograd: gradients through RPC calls, as ``torch.autograd`` gives them locally.

Inside a :class:`context`, tensors sent by RPC record their send and receive in the autograd
graph, so a backward pass started here runs on every worker involved. :func:`backward` then
accumulates this worker's gradients into ``.grad`` like :meth:`torch.Tensor.backward`, and
:func:`grad` returns them like :func:`torch.autograd.grad`. Those two, ``get_gradients`` and
``DistAutogradContext`` exist only where PyTorch has distributed autograd.
"""

from __future__ import annotations

from collections.abc import Sequence
from threading import Lock

import torch
import torch.distributed.autograd as dist_autograd
from torch.distributed.autograd import context

from torchopt_fn.typing import TensorOrTensors, TupleOfOptionalTensors

__all__ = ["is_available", "context"]

# Serializes the accumulation into ``.grad`` of backward passes running in several threads
# (e.g. RPC handlers).
LOCK = Lock()


def is_available() -> bool:
    """Whether PyTorch was built with distributed autograd."""
    return dist_autograd.is_available()


def _as_tuple(tensors: TensorOrTensors) -> tuple[torch.Tensor, ...]:
    return (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors)


def _check_differentiable(inputs: Sequence[torch.Tensor]) -> None:
    if not all(t.requires_grad for t in inputs):
        raise RuntimeError("One of the differentiated Tensors does not require grad")


def _local_gradients(
    autograd_ctx_id: int, roots: TensorOrTensors, retain_graph: bool,
) -> dict[torch.Tensor, torch.Tensor]:
    """Runs the distributed backward pass from ``roots``; the gradients of this worker's leaves."""
    dist_autograd.backward(autograd_ctx_id, roots=list(_as_tuple(roots)), retain_graph=retain_graph)
    return dist_autograd.get_gradients(autograd_ctx_id)


if is_available():
    from torch.distributed.autograd import DistAutogradContext, get_gradients

    def backward(
        autograd_ctx_id: int,
        tensors: TensorOrTensors,
        retain_graph: bool = False,
        inputs: TensorOrTensors | None = None,
    ) -> None:
        """Accumulates into ``.grad`` the gradients of scalar ``tensors`` w.r.t. local leaves.

        The backward pass runs across every worker the forward pass went through; the
        gradients of leaves owned by other workers stay in their context.

        Args:
          autograd_ctx_id: the id of the current :class:`context`.
          tensors: the scalar tensors to differentiate (their gradients are summed).
          retain_graph: keep the graph for another backward pass.
          inputs: the leaves whose ``.grad`` receives the gradient; ``None`` is every local
            leaf the ``tensors`` depend on.

        Raises:
          RuntimeError: if ``inputs`` is an empty sequence or one of them does not require grad.
        """
        if inputs is not None:
            inputs = _as_tuple(inputs)
            if not inputs:
                raise RuntimeError("'inputs' argument to backward() cannot be empty.")
            _check_differentiable(inputs)

        gradients = _local_gradients(autograd_ctx_id, tensors, retain_graph)
        if inputs is not None:
            wanted = set(inputs)
            gradients = {p: g for p, g in gradients.items() if p in wanted}

        with LOCK:
            for p, g in gradients.items():
                p.grad = g if p.grad is None else p.grad.add(g)

    def grad(
        autograd_ctx_id: int,
        outputs: TensorOrTensors,
        inputs: TensorOrTensors,
        retain_graph: bool = False,
        allow_unused: bool = False,
    ) -> TupleOfOptionalTensors:
        """The gradients of the scalar ``outputs`` (summed) w.r.t. local ``inputs``.

        Nothing is accumulated into ``.grad``; the gradients also stay in the context
        (see ``get_gradients``).

        Args:
          autograd_ctx_id: the id of the current :class:`context`.
          outputs: the scalar tensors to differentiate.
          inputs: the local leaves to differentiate with respect to.
          retain_graph: keep the graph for another backward pass.
          allow_unused: give ``None`` for an input the outputs do not depend on instead of
            raising.

        Returns:
          One gradient (or ``None``) per input, in order.

        Raises:
          RuntimeError: if an input does not require grad, or is unused and
            ``allow_unused=False``.
        """
        inputs = _as_tuple(inputs)
        _check_differentiable(inputs)

        gradients = _local_gradients(autograd_ctx_id, outputs, retain_graph)
        if not allow_unused and any(p not in gradients for p in inputs):
            raise RuntimeError(
                "One of the differentiated Tensors appears to not have been used in the graph. "
                "Set allow_unused=True if this is the desired behavior.")
        return tuple(gradients.get(p) for p in inputs)

    __all__ += ["DistAutogradContext", "get_gradients", "backward", "grad"]
