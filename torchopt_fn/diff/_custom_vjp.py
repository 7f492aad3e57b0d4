"""Attach hand-written derivative rules to values computed without autograd.

Both implicit differentiation (the solution of an inner problem) and zero-order differentiation
(the value of a black-box function) compute their forward value outside of autograd and know how
to map output cotangents to input gradients (and, for implicit differentiation, input tangents
to output tangents). :func:`attach_vjp` connects them through one
:class:`torch.autograd.Function` written in the ``setup_context`` style with
``generate_vmap_rule = True``, so that it composes with ``torch.func`` (``grad``, ``vmap``,
``jacrev``, and with a forward rule ``jvp`` and ``jacfwd``) as well as with ``torch.autograd``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

Tensors = tuple[torch.Tensor, ...]
# (outputs, inputs, output cotangents) -> one gradient (or None) per input.
VjpRule = Callable[[Tensors, Tensors, Tensors], Sequence[torch.Tensor | None]]
# (outputs, inputs, input tangents, zeros for inputs without one) -> one tangent per output.
JvpRule = Callable[[Tensors, Tensors, Tensors], Sequence[torch.Tensor]]


class _Rules(NamedTuple):
    vjp: VjpRule
    jvp: JvpRule | None


class _CustomDerivatives(torch.autograd.Function):
    """Returns copies of its first ``num_outputs`` tensors; derivatives defer to the rules."""

    generate_vmap_rule = True

    @staticmethod
    def forward(rules: _Rules, num_outputs: int, *tensors: torch.Tensor) -> Tensors:
        del rules
        return tuple(t.clone() for t in tensors[:num_outputs])

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        rules, num_outputs, *tensors = inputs
        ctx.rules = rules
        ctx.num_outputs = num_outputs
        # The outputs, not their detached originals: when a rule is itself differentiated
        # (create_graph, torch.func.hessian), the dependence of the outputs on the inputs is then
        # accounted for, through this function's rules again.
        saved = (*output, *tensors[num_outputs:])
        ctx.save_for_backward(*saved)
        ctx.save_for_forward(*saved)

    @staticmethod
    def backward(ctx: Any, *cotangents: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        outputs, inputs = _split_saved(ctx)
        grads = tuple(ctx.rules.vjp(outputs, inputs, cotangents))
        return (None, None, *(None for _ in outputs), *grads)

    @staticmethod
    def jvp(ctx: Any, *tangents: torch.Tensor | None) -> Tensors:
        if ctx.rules.jvp is None:
            raise NotImplementedError("This operation supports reverse-mode differentiation only "
                                      "(torch.autograd, torch.func.grad/vjp/jacrev).")
        outputs, inputs = _split_saved(ctx)
        input_tangents = tuple(torch.zeros_like(x) if t is None else t
                               for x, t in zip(inputs, tangents[2 + len(outputs):], strict=True))
        return tuple(ctx.rules.jvp(outputs, inputs, input_tangents))


def _split_saved(ctx: Any) -> tuple[Tensors, Tensors]:
    saved = ctx.saved_tensors
    return saved[:ctx.num_outputs], saved[ctx.num_outputs:]


def attach_vjp(
    outputs: Sequence[torch.Tensor],
    inputs: Sequence[torch.Tensor],
    rule: VjpRule,
    jvp_rule: JvpRule | None = None,
) -> Tensors:
    """Returns copies of ``outputs`` that are differentiable with respect to ``inputs``.

    Args:
        outputs: Values computed without autograd history (detached).
        inputs: The tensors the outputs depend on; they are saved for the derivative rules, so
            modifying them in place before backward is an error, as usual in autograd.
        rule: ``rule(outputs, inputs, cotangents)`` returning the gradient (or ``None``) of each
            input given the cotangent of each output.
        jvp_rule: ``jvp_rule(outputs, inputs, tangents)`` returning the tangent of each output
            given one tangent per input (zeros where none was given); without it, forward-mode
            differentiation raises ``NotImplementedError``.

    The rules run under ``torch.func.vmap`` when the caller is vmapped (also inside ``jacrev`` and
    ``jacfwd``), so there they must be free of data-dependent Python control flow.

    Returns:
        The outputs, now connected to ``inputs`` in the autograd graph.
    """
    return _CustomDerivatives.apply(_Rules(rule, jvp_rule), len(outputs), *outputs, *inputs)
