"""Hypothesis strategies for configurations: hyperparameters, schedules and transformations.

Everything drawn carries a :class:`~optax_compat.testing._config.Config`, so a shrunk
counter-example prints as the code that builds it and can be rebuilt in real Optax.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

from hypothesis import strategies as st

from optax_compat._src import base
from optax_compat.testing._config import Config, DescribedSchedule
from optax_compat.testing._hyperparameters import LEARNING_RATE, SCHEDULE, SPECS, spec

# The simplest values first: hypothesis shrinks towards the start of a sampled_from.
_SIMPLE_LEARNING_RATES = st.sampled_from([0.1, 0.01, 1e-3, 1.0])


def _values(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


_STEPS = st.integers(1, 20)


def _schedule_configs(low: float, high: float) -> dict[str, st.SearchStrategy[Config]]:
    value = _values(low, high)
    fraction = _values(0.0, 1.0)

    def config(name: str, **kwargs: st.SearchStrategy[Any]) -> st.SearchStrategy[Config]:
        return st.fixed_dictionaries(kwargs).map(
            lambda drawn: Config(name, kwargs={key: drawn[key] for key in kwargs}))

    boundaries_and_scales = st.dictionaries(st.integers(1, 20), _values(0.1, 1.0), max_size=3)
    return {
        "constant_schedule": config("constant_schedule", value=value),
        "linear_schedule": config("linear_schedule", init_value=value, end_value=value,
                                  transition_steps=_STEPS, transition_begin=st.integers(0, 5)),
        "polynomial_schedule": config("polynomial_schedule", init_value=value, end_value=value,
                                      power=_values(0.5, 3.0), transition_steps=_STEPS,
                                      transition_begin=st.integers(0, 5)),
        "exponential_decay": config("exponential_decay", init_value=value,
                                    transition_steps=_STEPS, decay_rate=_values(0.1, 0.99),
                                    transition_begin=st.integers(0, 5), staircase=st.booleans()),
        "cosine_decay_schedule": config("cosine_decay_schedule", init_value=value,
                                        decay_steps=_STEPS, alpha=fraction,
                                        exponent=_values(0.5, 2.0)),
        "piecewise_constant_schedule": config("piecewise_constant_schedule", init_value=value,
                                              boundaries_and_scales=boundaries_and_scales),
        "piecewise_interpolate_schedule": config(
            "piecewise_interpolate_schedule",
            interpolate_type=st.sampled_from(["linear", "cosine"]), init_value=value,
            boundaries_and_scales=boundaries_and_scales),
        "linear_onecycle_schedule": config("linear_onecycle_schedule", transition_steps=_STEPS,
                                           peak_value=value, pct_start=_values(0.1, 0.4),
                                           pct_final=_values(0.5, 0.9)),
        "cosine_onecycle_schedule": config("cosine_onecycle_schedule", transition_steps=_STEPS,
                                           peak_value=value, pct_start=_values(0.1, 0.9)),
        "warmup_constant_schedule": config("warmup_constant_schedule", init_value=value,
                                           peak_value=value, warmup_steps=_STEPS),
        "warmup_cosine_decay_schedule": config(
            "warmup_cosine_decay_schedule", init_value=value, peak_value=value,
            warmup_steps=_STEPS, decay_steps=st.integers(21, 40), end_value=value),
        "warmup_exponential_decay_schedule": config(
            "warmup_exponential_decay_schedule", init_value=value, peak_value=value,
            warmup_steps=_STEPS, transition_steps=_STEPS, decay_rate=_values(0.1, 0.99)),
        "sgdr_schedule": st.lists(st.fixed_dictionaries(
            {"init_value": value, "peak_value": value, "warmup_steps": st.integers(1, 5),
             "decay_steps": st.integers(6, 15)}), min_size=1, max_size=3).map(
            lambda kwargs: Config("sgdr_schedule", kwargs={"cosine_kwargs": kwargs})),
    }


def schedule_names() -> list[str]:
    """The schedules :func:`schedules` draws from (join_schedules is drawn by nesting)."""
    return [*_schedule_configs(0.0, 1.0), "join_schedules"]


@st.composite
def schedules(draw: Any, names: Sequence[str] | None = None, min_value: float = 1e-4,
              max_value: float = 1.0, max_depth: int = 1) -> DescribedSchedule:
    """A strategy for schedules of the schedule family, printed as the code that builds them.

    Args:
      names: the schedule functions to draw from (all of :func:`schedule_names` by default).
      min_value: smallest value of the drawn scalar arguments (init, peak, end values).
      max_value: largest value of the drawn scalar arguments.
      max_depth: how deeply ``join_schedules`` may nest other schedules (0: never).

    Returns:
      A strategy of callables ``count -> value`` with a ``config`` attribute that also builds
      the same schedule in real Optax (``schedule.config.build(optax)``). At an int32 count,
      as optimizer states hold, values are computed in float32 (as JAX does), so compare
      them with Optax's at float32 precision.
    """
    configs = _schedule_configs(min_value, max_value)
    chosen = list(names) if names is not None else schedule_names()
    unknown = set(chosen) - set(schedule_names())
    if unknown:
        raise ValueError(f"Unknown schedules {sorted(unknown)}; use some of {schedule_names()}.")
    if max_depth <= 0 and "join_schedules" in chosen:
        chosen.remove("join_schedules")
    name = draw(st.sampled_from(chosen))
    if name != "join_schedules":
        return DescribedSchedule(draw(configs[name]))
    inner = [draw(schedules([n for n in chosen if n != "join_schedules"] or None, min_value,
                            max_value, max_depth - 1))
             for _ in range(draw(st.integers(2, 3)))]
    boundaries = sorted(draw(st.lists(st.integers(1, 20), min_size=len(inner) - 1,
                                      max_size=len(inner) - 1, unique=True)))
    return DescribedSchedule(Config("join_schedules", kwargs={
        "schedules": [schedule.config for schedule in inner], "boundaries": boundaries}))


def hyperparameters(name: str, *, with_schedules: bool = False) -> st.SearchStrategy[dict]:
    """A strategy for valid keyword arguments of the public transformation ``name``.

    Arguments without a default are always drawn; the others are drawn or left out (so
    counter-examples shrink to the defaults), from ranges meaningful for the method.

    Args:
      name: a public name such as ``"adam"``, ``"scale_by_rms"`` or ``"contrib.muon"``.
      with_schedules: draw the learning rate as a schedule half of the time.

    Returns:
      A strategy of keyword-argument dicts for ``optax_compat.<name>`` (and ``optax.<name>``).

    Raises:
      ValueError: for a name without known ranges.
    """
    learning_rate = (st.one_of(_SIMPLE_LEARNING_RATES, _values(1e-4, 1.0), schedules())
                     if with_schedules else st.one_of(_SIMPLE_LEARNING_RATES, _values(1e-4, 1.0)))
    entry = spec(name)
    placeholders = {id(LEARNING_RATE): learning_rate, id(SCHEDULE): schedules()}
    substitute = lambda table: {key: placeholders.get(id(value), value)
                                for key, value in table.items()}
    order = [*entry.required, *entry.optional]
    return st.fixed_dictionaries(substitute(entry.required),
                                 optional=substitute(entry.optional)).map(
        lambda drawn: {key: drawn[key] for key in order if key in drawn})


class DrawnTransformation(NamedTuple):
    """A drawn transformation and the configuration that builds it (printed as code)."""

    transformation: base.GradientTransformation
    config: Config

    def __repr__(self) -> str:
        return repr(self.config)


@functools.cache
def _available(name: str) -> bool:
    import optax_compat

    try:
        functools.reduce(getattr, name.split("."), optax_compat)
    except AttributeError:
        return False
    return True


def transform_names(include_random: bool = False, include_extra_args: bool = False,
                    include_without_scalar_leaves: bool = False) -> list[str]:
    """The names :func:`transforms` draws from: those with known ranges that optax_compat has.

    Args:
      include_random: include transformations that draw random numbers.
      include_extra_args: include those that need extra ``update`` arguments (``value``, ...).
      include_without_scalar_leaves: include those that reject 0-d leaves (SM3) or accept
        only matrices (``contrib.scale_by_muon``).

    Transformations of per-example gradients (differential privacy) are never included.

    Returns:
      Sorted public names, simplest (``identity``) first.
    """
    names = [name for name, entry in SPECS.items()
             if (include_random or not entry.random)
             and (include_extra_args or not entry.extra_args)
             and (include_without_scalar_leaves or entry.scalar_leaves)
             and not entry.per_example_grads and _available(name)]
    return sorted(names, key=lambda name: (name != "identity", name))


@st.composite
def transforms(draw: Any, names: Sequence[str] | None = None, max_depth: int = 1,
               max_length: int = 3, with_schedules: bool = False) -> DrawnTransformation:
    """A strategy for single transformations and (nested) ``chain``s of them.

    Args:
      names: public names to draw from (by default :func:`transform_names`, i.e. those that
        are deterministic and need no extra ``update`` arguments).
      max_depth: how deeply ``chain``s may nest (0: single transformations only).
      max_length: most transformations in one ``chain``.
      with_schedules: sometimes draw learning rates as schedules.

    Returns:
      A strategy of :class:`DrawnTransformation` ``(transformation, config)`` pairs; the
      config prints as code, e.g. ``chain(clip(max_delta=1.0), adam(learning_rate=0.1))``,
      and builds the same transformation in Optax: ``config.build(optax)``.
    """
    import optax_compat

    chosen = list(names) if names is not None else transform_names()
    if not chosen:
        raise ValueError("No transformation names to draw from.")
    config = draw(_configs(chosen, max_depth, max_length, with_schedules))
    return DrawnTransformation(config.build(optax_compat), config)


@st.composite
def _configs(draw: Any, names: list[str], depth: int, max_length: int,
             with_schedules: bool) -> Config:
    if depth > 0 and draw(st.booleans()):
        length = draw(st.integers(1, max_length))
        return Config("chain", args=tuple(draw(_configs(names, depth - 1, max_length,
                                                        with_schedules))
                                          for _ in range(length)))
    name = draw(st.sampled_from(names))
    return Config(name, kwargs=draw(hyperparameters(name, with_schedules=with_schedules)))
