"""Optax's public names: which exist here, and with Optax's exact signatures.

Every public name of the covered Optax namespaces must exist in ``optax_compat`` under the same
path, except those listed in ``NOT_YET_PORTED`` (the honest list of what is missing). The test
fails both when a name is missing and when a listed name has since been ported, so the list
always tells the truth. Each present callable must have Optax's parameter names, kinds and
defaults.
"""

import importlib
import inspect
import math

import pytest

NAMESPACES = ["optax", "optax.tree_utils", "optax.tree", "optax.schedules", "optax.transforms",
              "optax.assignment", "optax.contrib", "optax.experimental",
              "optax.experimental.aggregating", "optax.losses", "optax.microbatching",
              "optax.perturbations", "optax.projections", "optax.second_order"]

# Submodules of optax not ported (none left) and public names not ported (none left).
SUBMODULES_NOT_YET_PORTED: set[str] = set()
NOT_YET_PORTED: set[str] = set()


def _public(module):
    return sorted(n for n in dir(module) if not n.startswith("_"))


def _namespace(dotted):
    """The module or attribute at ``dotted`` (``optax.experimental.aggregating`` is one)."""
    top, *rest = dotted.split(".")
    found = importlib.import_module(top)
    for part in rest:
        found = getattr(found, part)
    return found


def _all_names():
    for namespace in NAMESPACES:
        module = _namespace(namespace)
        for name in _public(module):
            value = getattr(module, name)
            if inspect.ismodule(value) and (
                    name in SUBMODULES_NOT_YET_PORTED
                    or not value.__name__.startswith(module.__name__ + ".")):
                continue  # not ported yet, or a module Optax imported from elsewhere
            yield namespace, name


def _ours(namespace, name):
    module = _namespace(namespace.replace("optax", "optax_compat", 1))
    return getattr(module, name)


def test_every_covered_name_exists_or_is_listed_as_missing():
    missing = set()
    for namespace, name in _all_names():
        try:
            _ours(namespace, name)
        except (AttributeError, ImportError):
            missing.add(f"{namespace}.{name}")
    assert missing - NOT_YET_PORTED == set(), "missing and not declared"
    assert NOT_YET_PORTED - missing == set(), "ported now: remove from NOT_YET_PORTED"


def _signature(obj):
    target = obj.func if hasattr(obj, "func") and hasattr(obj, "keywords") else obj
    try:
        return inspect.signature(target), getattr(obj, "keywords", {})
    except (TypeError, ValueError):
        return None, {}


def _same_default(theirs, ours):
    if theirs is inspect.Parameter.empty or ours is inspect.Parameter.empty:
        return theirs is ours
    if isinstance(theirs, float) and isinstance(ours, float):
        return theirs == ours or (math.isnan(theirs) and math.isnan(ours))
    if callable(theirs) or type(theirs).__module__.startswith(("jax", "numpy")):
        return True  # a JAX function or dtype default maps to its PyTorch counterpart
    if type(theirs).__module__.startswith("optax."):
        # An Optax object (an enum member, a noise distribution): ours is our class's twin.
        return (type(theirs).__name__ == type(ours).__name__
                and getattr(theirs, "name", None) == getattr(ours, "name", None))
    return theirs == ours


def _is_type_alias(obj):
    return type(obj).__module__ == "typing"


def _callables():
    for namespace, name in _all_names():
        if f"{namespace}.{name}" in NOT_YET_PORTED:
            continue
        theirs = getattr(_namespace(namespace), name)
        if inspect.ismodule(theirs) or not callable(theirs) or _is_type_alias(theirs):
            continue
        yield pytest.param(namespace, name, id=f"{namespace}.{name}")


@pytest.mark.parametrize("namespace,name", list(_callables()))
def test_signature_matches_optax(namespace, name):
    theirs_obj = getattr(_namespace(namespace), name)
    ours_obj = _ours(namespace, name)
    if inspect.isclass(theirs_obj) and issubclass(theirs_obj, tuple) and hasattr(
            theirs_obj, "_fields"):
        assert ours_obj._fields == theirs_obj._fields, "NamedTuple fields differ"
        assert ours_obj.__name__ == theirs_obj.__name__
        return
    (theirs, theirs_kw), (ours, ours_kw) = _signature(theirs_obj), _signature(ours_obj)
    if theirs is None:
        return
    assert ours is not None, "ours has no inspectable signature"
    assert theirs_kw.keys() == ours_kw.keys(), "partial keywords differ"
    theirs_params, ours_params = list(theirs.parameters.values()), list(ours.parameters.values())
    assert [p.name for p in ours_params] == [p.name for p in theirs_params]
    assert [p.kind for p in ours_params] == [p.kind for p in theirs_params]
    for t, o in zip(theirs_params, ours_params):
        assert _same_default(t.default, o.default), (
            f"default of {t.name}: {t.default!r} vs {o.default!r}")


def test_every_optax_submodule_is_covered():
    import optax

    submodules = {f"optax.{name}" for name in _public(optax)
                  if inspect.ismodule(getattr(optax, name))}
    assert submodules - set(NAMESPACES) == set()
