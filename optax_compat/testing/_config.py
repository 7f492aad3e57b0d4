"""Printable, rebuildable descriptions of configurations: ``adam(learning_rate=0.1, b1=0.5)``.

A :class:`Config` names a public function and its arguments; it builds the object in
``optax_compat`` or, unchanged, in real Optax, and prints as the code that builds it, so a
shrunk hypothesis counter-example reads as a line one can paste.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class Config:
    """The call ``<module>.<name>(*args, **kwargs)``, where arguments may be configs themselves.

    Attributes:
      name: a public name relative to the package, e.g. ``"adam"`` or ``"contrib.muon"``.
      args: positional arguments.
      kwargs: keyword arguments.
    """

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def build(self, module: Any, **overrides: Any) -> Any:
        """Builds the object in ``module`` (``optax_compat`` or ``optax``).

        Args:
          module: the package in which ``name`` is resolved.
          **overrides: keyword arguments replacing those of the configuration.

        Returns:
          The built object; nested configurations are built in the same module.
        """
        function = functools.reduce(getattr, self.name.split("."), module)
        args = [build_value(arg, module) for arg in self.args]
        kwargs = {key: build_value(value, module)
                  for key, value in {**self.kwargs, **overrides}.items()}
        return function(*args, **kwargs)

    def __repr__(self) -> str:
        parts = [*map(repr, self.args), *(f"{k}={v!r}" for k, v in self.kwargs.items())]
        return f"{self.name}({', '.join(parts)})"


class DescribedSchedule:
    """A schedule built from a :class:`Config`: callable like the schedule, printed as code."""

    def __init__(self, config: Config) -> None:
        import optax_compat

        self.config = config
        self._schedule = config.build(optax_compat)

    def __call__(self, count: Any) -> Any:
        return self._schedule(count)

    def __repr__(self) -> str:
        return repr(self.config)


def build_value(value: Any, module: Any) -> Any:
    """``value`` with every configuration inside it built in ``module``.

    Configurations and described schedules are built; torch dtypes become the module's own
    dtype objects when building for JAX; lists, tuples and dicts are rebuilt recursively.
    """
    if isinstance(value, Config):
        return value.build(module)
    if isinstance(value, DescribedSchedule):
        return value.config.build(module)
    if isinstance(value, torch.dtype) and module.__name__ != "optax_compat":
        import jax.numpy as jnp

        return getattr(jnp, str(value).removeprefix("torch."))
    if isinstance(value, dict):
        return {key: build_value(item, module) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(build_value(item, module) for item in value)
    return value

