"""Marks the autograd nodes an optimizer step creates, so the visualizer can fuse them.

A differentiable optimizer step (an Adam update is about a dozen elementwise operations per
parameter) leaves many autograd nodes behind. :func:`tag_optimizer_step` records, on the
``grad_fn`` of every new parameter, a label (``"MetaAdam step 1"``), the nodes where the step
began (the ``grad_fn`` of its inputs: old parameters, the loss or the gradients, old optimizer
state) and the leaves the step owns (an initial optimizer state that requires grad).
:func:`torchopt_fn.visual.make_dot` with ``fuse_optimizer=True`` draws everything that was built
after those inputs, between them and a tagged output, as one node per parameter and step.

The record lives in :attr:`torch.autograd.graph.Node.metadata`, a dict every autograd node has. It
holds nodes and at most the optimizer's 0-d step counter, never parameters or gradients: the
recorded nodes are ancestors of the tagged node, so the graph keeps them alive anyway, and tagging
adds no lifetime to any large tensor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import optree
import torch
from torch.autograd.graph import Node, get_gradient_edge

from optax_compat._runtime import tree_math

__all__ = ["OPTIMIZER_STEP_KEY", "OptimizerStepTag", "extend_optimizer_step", "optimizer_step_tag",
           "path_name", "tag_optimizer_step"]

OPTIMIZER_STEP_KEY = "torchopt_fn.optimizer_step"


@dataclasses.dataclass(eq=False)
class OptimizerStepTag:
    """What :func:`tag_optimizer_step` stores in ``grad_fn.metadata[OPTIMIZER_STEP_KEY]``.

    Attributes:
      name: Text of the fused node before the step number, e.g. ``"MetaAdam step"``.
      step: The step number: an int, a 0-d integer tensor (an optimizer's count, read only when
        the label is drawn, so that tagging never waits for the device) or ``None``.
      output_nrs: Which outputs of the node are new parameters of this step (a ``torch._foreach_*``
        update produces all parameters from one node, one output each).
      boundary: The ``grad_fn`` of the step's inputs. They and every node they were computed
        from existed before the step; a walk backward from the tagged node that reaches one of
        them has left the step.
      own_leaves: The ``AccumulateGrad`` nodes of the optimizer-state leaves the step read (an
        initial state created with ``requires_grad=True``); they are drawn inside the step.
      names: The parameter's name or path by output number, drawn when ``params`` does not
        name the new parameter.
    """

    name: str
    step: int | torch.Tensor | None
    output_nrs: set[int]
    boundary: frozenset[Node]
    own_leaves: frozenset[Node]
    names: dict[int, str] = dataclasses.field(default_factory=dict)

    @property
    def label(self) -> str:
        """The text drawn on the fused node, e.g. ``"MetaAdam step 1"``."""
        return self.name if self.step is None else f"{self.name} {int(self.step)}"


def tag_optimizer_step(outputs: Any, inputs: Any, label: str,
                       step: int | torch.Tensor | None = None, *, state: Any = None,
                       names: Sequence[str] | None = None) -> None:
    """Records that ``outputs`` were computed from ``inputs`` by one optimizer step.

    :func:`torchopt_fn.visual.make_dot` then draws the step as one node per output. The
    meta-optimizers and the functional optimizers of ``torchopt_fn`` tag their steps
    themselves; tag your own loop (plain ``optax_compat``, or hand-written) after each step::

        updates, state = tx.update(grads, state, params)
        new_params = optax_compat.apply_updates(params, updates)
        tag_optimizer_step(new_params, (params, grads), "adam step", step=step)

    Cheap enough to call on every differentiable step: one flatten of each tree and a dict write
    per output, and no host synchronisation (a tensor ``step`` is read only when drawn). Does
    nothing when grad mode is off or for outputs without a ``grad_fn``.

    Args:
      outputs: Pytree of tensors produced by the step (usually the new parameters).
      inputs: Pytree of tensors the step consumed: the old parameters and the gradients, or
        the loss when the step computes the gradients itself (then the gradient computation is
        part of the fused node too).
      label: Name of the step as the visualizer should draw it, e.g. ``"MetaAdam step 1"``, or
        its prefix (``"adam step"``) when ``step`` is given.
      step: The step number appended to ``label`` when drawn, e.g. an optimizer's count tensor.
      state: The optimizer state the step read. Tensors an earlier step computed are inputs;
        leaves that require grad (an initial state with ``moment_requires_grad=True``) belong to
        this step.
      names: One name per leaf of ``outputs`` (the parameters' names), drawn on fused nodes that
        ``params`` does not name. Defaults to the leaves' paths in ``outputs``
        (``"0.weight"`` for a dict key, ``"[1]"`` for a list position).
    """
    if not torch.is_grad_enabled():
        return
    paths, leaves, _ = optree.tree_flatten_with_path(outputs, none_is_leaf=tree_math.NONE_IS_LEAF,
                                                     namespace=tree_math.NAMESPACE)
    names = list(names) if names is not None else [path_name(path) for path in paths]
    tagged = [(t.grad_fn, t.output_nr, name) for t, name in zip(leaves, names, strict=True)
              if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    if not tagged:
        return
    state_tensors = [t for t in tree_math.leaves(state) if isinstance(t, torch.Tensor)]
    boundary = frozenset(t.grad_fn for t in [*tree_math.leaves(inputs), *state_tensors]
                         if isinstance(t, torch.Tensor) and t.grad_fn is not None)
    own_leaves = frozenset(get_gradient_edge(t).node for t in state_tensors
                           if t.grad_fn is None and t.requires_grad)
    for grad_fn, output_nr, name in tagged:
        _record(grad_fn, output_nr, name, OptimizerStepTag(
            name=label, step=step, output_nrs=set(), boundary=boundary, own_leaves=own_leaves))


def extend_optimizer_step(outputs: Sequence[torch.Tensor | None],
                          updates: Sequence[torch.Tensor | None]) -> None:
    """Tags ``outputs[i]``, computed from the tagged ``updates[i]``, as part of the same step.

    ``apply_updates`` calls it, so that adding the updates to the parameters (one
    ``torch._foreach_add`` node for all of them) is drawn inside each parameter's step.
    """
    if not torch.is_grad_enabled():
        return
    for output, update in zip(outputs, updates, strict=True):
        if output is None or update is None or output.grad_fn is None or update.grad_fn is None:
            continue
        tag = optimizer_step_tag(update.grad_fn)
        if tag is not None and update.output_nr in tag.output_nrs:
            _record(output.grad_fn, output.output_nr, tag.names.get(update.output_nr),
                    dataclasses.replace(tag, output_nrs=set(), names={}))


def _record(grad_fn: Node, output_nr: int, name: str | None, new_tag: OptimizerStepTag) -> None:
    """Adds output ``output_nr`` of ``grad_fn`` to its tag, or tags it with ``new_tag``."""
    metadata = grad_fn.metadata
    tag = metadata.get(OPTIMIZER_STEP_KEY)
    if tag is None or tag.name != new_tag.name or tag.step is not new_tag.step:
        tag = metadata[OPTIMIZER_STEP_KEY] = new_tag
    tag.output_nrs.add(output_nr)
    if name is not None:
        tag.names[output_nr] = name


def path_name(path: tuple[Any, ...]) -> str:
    """A pytree path as Python would spell the access: ``("aux", 0)`` -> ``"aux[0]"``."""
    text = ""
    for key in path:
        if isinstance(key, int):
            text += f"[{key}]"
        else:
            text += f".{key}" if text else str(key)
    return text


def optimizer_step_tag(node: Node) -> OptimizerStepTag | None:
    """The tag :func:`tag_optimizer_step` left on ``node``, or ``None``."""
    return node.metadata.get(OPTIMIZER_STEP_KEY)
