"""Attach a hand-written backward rule to values computed without autograd.

Both implicit differentiation (the solution of an inner problem) and zero-order differentiation
(the value of a black-box function) compute their forward value outside of autograd and know how
to map output cotangents to input gradients. :func:`attach_vjp` connects the two through one
:class:`torch.autograd.Function` written in the ``setup_context`` style with
``generate_vmap_rule = True``, so that it composes with ``torch.func`` (``grad``, ``vmap``,
``jacrev``) as well as with ``torch.autograd``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

# (outputs, inputs, output cotangents) -> one gradient (or None) per input.
VjpRule = Callable[
    [tuple[torch.Tensor, ...], tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]],
    Sequence[torch.Tensor | None],
]


class _CustomVjp(torch.autograd.Function):
    """Returns copies of its first ``num_outputs`` tensors; backward defers to a rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        rule: VjpRule, num_outputs: int, *tensors: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        del rule
        return tuple(t.clone() for t in tensors[:num_outputs])

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        rule, num_outputs, *tensors = inputs
        ctx.rule = rule
        ctx.num_outputs = num_outputs
        ctx.save_for_backward(*tensors)

    @staticmethod
    def backward(ctx: Any, *cotangents: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = ctx.saved_tensors
        outputs, inputs = saved[:ctx.num_outputs], saved[ctx.num_outputs:]
        grads = tuple(ctx.rule(outputs, inputs, cotangents))
        if len(grads) != len(inputs):
            raise RuntimeError(f"internal error: the backward rule returned {len(grads)} "
                               f"gradients for {len(inputs)} inputs.")
        return (None, None, *(None for _ in outputs), *grads)


def attach_vjp(
    outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], rule: VjpRule,
) -> tuple[torch.Tensor, ...]:
    """Returns copies of ``outputs`` that are differentiable with respect to ``inputs``.

    Args:
        outputs: Values computed without autograd history (detached).
        inputs: The tensors the outputs depend on; they are saved for the backward pass, so
            modifying them in place before backward is an error, as usual in autograd.
        rule: ``rule(outputs, inputs, cotangents)`` returning the gradient (or ``None``) of each
            input given the cotangent of each output. It runs under ``torch.func.vmap`` when the
            caller is vmapped, so it must be free of data-dependent Python control flow there.

    Returns:
        The outputs, now connected to ``inputs`` in the autograd graph.
    """
    return _CustomVjp.apply(rule, len(outputs), *outputs, *inputs)
