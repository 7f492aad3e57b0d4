"""Composing gradient transformations (mirrors ``optax/transforms/_combining.py``)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from optax_compat._src import base
from optax_compat.transforms import _masking


def chain(*args: base.GradientTransformation) -> base.GradientTransformationExtraArgs:
    """Applies transformations one after the other.

    The state is the tuple of the inner states. Keyword extra arguments given to ``update``
    (``value=``, ...) are passed to every inner transformation that accepts extra arguments;
    the others are wrapped with :func:`with_extra_args_support` and ignore them. ``inplace=True``
    reaches only the inner transformations that declare in-place support.

    Args:
      *args: the transformations, in the order they are applied.

    Returns:
      A :class:`GradientTransformationExtraArgs` (whatever the types of ``args``).

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.chain(optax.clip(1.0), optax.scale(-0.1))
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([3.0, -0.5])}, state, params)
      >>> updates["w"]
      tensor([-0.1000,  0.0500])
    """
    transforms = [base.with_extra_args_support(t) for t in args]

    def init_fn(params: base.Params) -> tuple[base.OptState, ...]:
        return tuple(t.init(params) for t in transforms)

    @bb.supports_inplace
    @bb.elementwise_if(*transforms)
    def update_fn(updates: base.Updates, state: tuple[base.OptState, ...],
                  params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, tuple[base.OptState, ...]]:
        if len(transforms) != len(state):
            raise ValueError(
                "The number of updates and states has to be the same in chain! Make sure you "
                f"have called init first! (chain of {len(transforms)} transformations, state "
                f"with {len(state)} entries)")
        new_state = []
        for inner_state, t in zip(state, transforms, strict=True):
            updates, new_inner_state = t.update(updates, inner_state, params, **extra_args)
            new_state.append(new_inner_state)
        return updates, tuple(new_state)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def named_chain(
    *args: tuple[str, base.GradientTransformation],
) -> base.GradientTransformationExtraArgs:
    """Applies named transformations one after the other; ``state[name]`` is each one's state.

    Args:
      *args: ``(name, transformation)`` pairs with unique names, in the order they are applied.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose state is an ``OrderedDict`` keyed by
      name (ordered as given, for inspection).

    Raises:
      ValueError: if two transformations share a name.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.named_chain(("clip", optax.clip(1.0)), ("scale", optax.scale(-0.1)))
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([3.0, -0.5])}, state, params)
      >>> updates["w"], list(state)
      (tensor([-0.1000,  0.0500]), ['clip', 'scale'])
    """
    names = [name for name, _ in args]
    if len(names) != len(set(names)):
        raise ValueError(f"Named transformations must have unique names, but got {names}")
    transforms = [(name, base.with_extra_args_support(t)) for name, t in args]

    def init_fn(params: base.Params) -> collections.OrderedDict:
        return collections.OrderedDict((name, t.init(params)) for name, t in transforms)

    @bb.supports_inplace
    @bb.elementwise_if(*(t for _, t in transforms))
    def update_fn(updates: base.Updates, state: Mapping[str, base.OptState],
                  params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, collections.OrderedDict]:
        new_state = collections.OrderedDict()
        for name, t in transforms:
            updates, new_state[name] = t.update(updates, state[name], params, **extra_args)
        return updates, new_state

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


class PartitionState(NamedTuple):
    """The inner states of :func:`partition`, one :class:`MaskedState` per label."""

    inner_states: Mapping[Hashable, base.OptState]


def partition(
    transforms: Mapping[Hashable, base.GradientTransformation],
    param_labels: base.PyTree | Callable[[base.PyTree], base.PyTree],
    *,
    mask_compatible_extra_args: bool = False,
) -> base.GradientTransformationExtraArgs:
    """Applies a different transformation to each labelled subset of the parameters.

    Each label's transformation is :func:`masked` to the leaves carrying that label, e.g.
    ``partition({'w': adam(1e-3), 'b': sgd(1e-2)}, labels)``.

    Args:
      transforms: maps each label to the transformation of the leaves with that label.
      param_labels: a tree of labels with the structure of the params or a prefix of it, or
        a function returning one given the params/updates.
      mask_compatible_extra_args: also mask extra arguments that have the updates' structure.

    Returns:
      A :class:`GradientTransformationExtraArgs` with a :class:`PartitionState`.

    Raises:
      ValueError: at ``init``, naming the labels that have no transformation, or naming the
        first path where the label tree does not match the params.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.5])}
      >>> tx = optax.partition({"decay": optax.adamw(0.1), "frozen": optax.set_to_zero()},
      ...                      param_labels={"w": "decay", "b": "frozen"})
      >>> state = tx.init(params)
      >>> updates, state = tx.update(params, state, params)
      >>> updates["w"], updates["b"]
      (tensor([-0.1000,  0.1000]), tensor([0.]))
    """
    transforms = {label: base.with_extra_args_support(t) for label, t in transforms.items()}

    def labels_for(tree: base.PyTree) -> base.PyTree:
        return param_labels(tree) if callable(param_labels) else param_labels

    def masked_by_label(labels: base.PyTree) -> dict[Hashable, base.GradientTransformation]:
        return {
            group: _masking.masked(
                t, tree_math.tree_map(lambda label, group=group: label == group, labels),
                mask_compatible_extra_args=mask_compatible_extra_args)
            for group, t in transforms.items()
        }

    def init_fn(params: base.Params) -> PartitionState:
        labels = labels_for(params)
        tree_math.map_over_prefix(lambda label, subtree: label, labels, params,
                                  what="param_labels")
        label_set = set(tree_math.leaves(labels))
        if not label_set.issubset(transforms.keys()):
            missing = sorted(map(str, label_set - transforms.keys()))
            raise ValueError(
                "Some parameters have no corresponding transformation.\n"
                f"Parameter labels: {sorted(map(str, label_set))} \n"
                f"Transforms keys: {sorted(map(str, transforms.keys()))} \n"
                f"Labels without a transformation: {missing}")
        return PartitionState({group: t.init(params)
                               for group, t in masked_by_label(labels).items()})

    @bb.supports_inplace

    def update_fn(updates: base.Updates, state: PartitionState,
                  params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, PartitionState]:
        new_inner_states = {}
        for group, t in masked_by_label(labels_for(updates)).items():
            updates, new_inner_states[group] = t.update(
                updates, state.inner_states[group], params, **extra_args)
        return updates, PartitionState(new_inner_states)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


multi_transform = partition
MultiTransformState = PartitionState
