"""Random optimizer programs for differential testing against real Optax.

A *program* is a configuration tree drawn from a grammar of aliases and transforms (leaves),
schedules (as hyper-parameters) and combinators (``chain``, ``named_chain``, ``masked`` with
pytree and callable masks, ``partition``, ``inject_hyperparams``, ``MultiSteps``,
``apply_if_finite``, ``lookahead``, ``flatten``, ``freeze``, ``conditionally_mask`` and
``conditionally_transform``), together with the params it runs on and the gradients of several
steps. Every node is a :class:`~optax_compat.testing._config.Config`, so a program builds the
same optimizer in ``optax_compat`` and in Optax and prints as the code that builds it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import optree
import torch
from hypothesis import strategies as st

from optax_compat.testing._config import Config, build_value
from optax_compat.testing._transform_strategies import hyperparameters, transform_names
from optax_compat.testing._tree_strategies import matching_trees, pytrees

# ``lookahead`` is drawn only at the root: it changes the type of the params.
COMBINATORS = ("chain", "named_chain", "masked", "masked_callable", "partition",
               "partition_callable", "inject_hyperparams", "MultiSteps", "apply_if_finite",
               "lookahead", "flatten", "freeze", "conditionally_mask",
               "conditionally_transform")

# Aliases whose every numeric hyper-parameter inject_hyperparams can hold.
INJECTABLE = ("sgd", "adam", "adamw", "rmsprop", "adagrad", "lion", "adabelief", "adamax",
              "nadam", "lamb", "yogi", "novograd", "radam", "amsgrad")


@dataclasses.dataclass(frozen=True)
class MinNdim:
    """A mask function usable in both libraries: ``True`` for leaves of at least ``ndim`` dims."""

    ndim: int

    def __call__(self, params: Any) -> Any:
        return optree.tree_map(lambda x: x.ndim >= self.ndim, params, none_is_leaf=False)


@dataclasses.dataclass(frozen=True)
class LabelByNdim:
    """A ``param_labels`` function: ``"matrix"`` for leaves of 2+ dims, else ``"vector"``."""

    def __call__(self, params: Any) -> Any:
        return optree.tree_map(lambda x: "matrix" if x.ndim >= 2 else "vector", params,
                               none_is_leaf=False)


@dataclasses.dataclass(frozen=True)
class EveryKthStep:
    """A ``should_transform_fn``: true on steps that are multiples of ``k``."""

    k: int

    def __call__(self, step: Any) -> Any:
        return step % self.k == 0


class Applied(Config):
    """``<name>(*args)(**kwargs)``: a factory applied twice, as ``inject_hyperparams(adam)(...)``.

    ``args[0]`` names the inner factory (built as the function itself, not called).
    """

    def build(self, module: Any, **overrides: Any) -> Any:
        wrapper = functools.reduce(getattr, self.name.split("."), module)
        inner = functools.reduce(getattr, self.args[0].split("."), module)
        kwargs = {key: build_value(value, module)
                  for key, value in {**self.kwargs, **overrides}.items()}
        return wrapper(inner, *self.args[1:])(**kwargs)

    def __repr__(self) -> str:
        inner = ", ".join([self.args[0], *map(repr, self.args[1:])])
        return f"{self.name}({inner})({', '.join(f'{k}={v!r}' for k, v in self.kwargs.items())})"


class MultiStepsConfig(Config):
    """``MultiSteps(inner, **kwargs).gradient_transformation()``."""

    def build(self, module: Any, **overrides: Any) -> Any:
        inner = build_value(self.args[0], module)
        kwargs = {key: build_value(value, module) for key, value in self.kwargs.items()}
        return module.MultiSteps(inner, **kwargs).gradient_transformation()

    def __repr__(self) -> str:
        return super().__repr__() + ".gradient_transformation()"


@dataclasses.dataclass(frozen=True)
class Program:
    """A drawn program: configuration, params, per-step gradients, and whether the root is
    ``lookahead`` (whose params are ``LookaheadParams``)."""

    config: Config
    params: Any
    grads: tuple[Any, ...]
    lookahead: bool = False

    def __repr__(self) -> str:
        return (f"Program({self.config!r}, params={self.params!r}, "
                f"grads=<{len(self.grads)} steps>, lookahead={self.lookahead})")


def _mask_like(draw: Any, params: Any) -> Any:
    return optree.tree_map(lambda _: draw(st.booleans()), params, none_is_leaf=False)


@st.composite
def _node(draw: Any, params: Any, depth: int, names: tuple[str, ...]) -> Config:
    """One node of the grammar for ``params`` (used to build masks and labels)."""
    injectable = [name for name in INJECTABLE if name in names]
    inner_kinds = tuple(kind for kind in COMBINATORS if kind != "lookahead"
                        and (kind != "inject_hyperparams" or injectable))
    kind = draw(st.sampled_from(("leaf",) * 3 + (inner_kinds if depth > 0 else ())))
    child = lambda: draw(_node(params, depth - 1, names))
    if kind == "leaf":
        name = draw(st.sampled_from(names))
        return Config(name, kwargs=draw(hyperparameters(name, with_schedules=True)))
    if kind == "chain":
        return Config("chain", args=tuple(child() for _ in range(draw(st.integers(1, 3)))))
    if kind == "named_chain":
        return Config("named_chain", args=tuple((f"t{i}", child())
                                                for i in range(draw(st.integers(1, 3)))))
    if kind == "masked":
        return Config("masked", args=(child(), _mask_like(draw, params)))
    if kind == "masked_callable":
        return Config("masked", args=(child(), MinNdim(draw(st.integers(0, 2)))))
    if kind == "partition":
        labels = optree.tree_map(lambda _: draw(st.sampled_from(["a", "b"])), params,
                                 none_is_leaf=False)
        return Config("partition", args=({"a": child(), "b": child()}, labels))
    if kind == "partition_callable":
        return Config("partition", args=({"matrix": child(), "vector": child()}, LabelByNdim()))
    if kind == "inject_hyperparams":
        name = draw(st.sampled_from(injectable))
        # A JAX dtype is callable: Optax's inject_hyperparams would take it for a schedule.
        kwargs = {key: value for key, value in draw(hyperparameters(name, with_schedules=True))
                  .items() if not key.endswith("_dtype")}
        return Applied("inject_hyperparams", args=(name,), kwargs=kwargs)
    if kind == "MultiSteps":
        return MultiStepsConfig("MultiSteps", args=(child(),),
                                kwargs={"every_k_schedule": draw(st.integers(1, 3)),
                                        "use_grad_mean": draw(st.booleans())})
    if kind == "apply_if_finite":
        return Config("apply_if_finite", args=(child(), draw(st.integers(1, 3))))
    if kind == "flatten":
        return Config("flatten", args=(child(),))
    if kind == "freeze":
        return Config("chain", args=(Config("freeze", args=(_mask_like(draw, params),)),
                                     child()))
    return Config(kind, args=(child(), EveryKthStep(draw(st.integers(1, 3)))))


@st.composite
def programs(draw: Any, dtype: torch.dtype = torch.float32, max_depth: int = 2,
             steps: int = 3, names: tuple[str, ...] | None = None) -> Program:
    """A strategy for random optimizer programs with their params and gradients.

    Args:
      dtype: the dtype of every leaf (run float32 programs with JAX's x64 off and
        ``optax_compat.config`` off, float64 programs with both on).
      max_depth: how deeply combinators nest.
      steps: how many update steps the gradients cover.
      names: the leaf transformations (default: :func:`transform_names`, deterministic ones
        without extra ``update`` arguments that accept 0-d leaves).

    Returns:
      A strategy of :class:`Program`. Gradients contain NaN or infinity only when the root is
      ``apply_if_finite``, which handles them. Params and gradients have no nonzero values
      below the square root of ``dtype``'s smallest normal number, so that the product of
      two of them is normal (XLA on CPU flushes subnormal results to zero, PyTorch does not).
    """
    names = tuple(names or transform_names())
    # XLA flushes subnormal results to zero: values whose products may be subnormal are 0.
    min_magnitude = float(torch.finfo(dtype).tiny) ** 0.5
    params = draw(pytrees(min_leaves=0, max_leaves=4, max_depth=2, dtypes=(dtype,),
                          max_dims=2, max_side=3, min_value=-2.0, max_value=2.0,
                          min_magnitude=min_magnitude, kinds=("dict", "list", "tuple"),
                          allow_none=True))
    config = draw(_node(params, max_depth, names))
    handles_nan = draw(st.booleans())
    if handles_nan:
        config = Config("apply_if_finite", args=(config, draw(st.integers(1, 3))))
    lookahead = draw(st.integers(0, 9)) == 0
    if lookahead:
        config = Config("lookahead", args=(config, draw(st.integers(1, 3)),
                                           draw(st.sampled_from([0.5, 0.8]))))
    grads = tuple(draw(matching_trees(params, min_value=-2.0, max_value=2.0,
                                      allow_nan=handles_nan, allow_infinity=handles_nan,
                                      min_magnitude=min_magnitude))
                  for _ in range(steps))
    return Program(config, params, grads, lookahead)


def grammar_names() -> dict[str, list[str]]:
    """What :func:`programs` can generate: leaf transformations, schedules, combinators."""
    from optax_compat.testing._transform_strategies import schedule_names

    return {"transforms": transform_names(), "schedules": schedule_names(),
            "combinators": list(COMBINATORS), "injectable": list(INJECTABLE)}
