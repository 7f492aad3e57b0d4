"""The ``>>>`` examples in ``optax_compat``'s docstrings run and print what they show.

Every optimizer, transformation, combinator and schedule (the names on those pages of the API
reference, ``docs/api_layout.py``) must have an example. The examples are collected from the
objects rather than with ``--doctest-modules`` so that re-exports are run once and aliases made
with ``functools.partial`` (``nadam``) are run too.
"""

import doctest
import functools
import importlib
import inspect
import pathlib
import pkgutil
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
NAMESPACES = ["optax_compat", "optax_compat.tree_utils", "optax_compat.tree",
              "optax_compat.schedules", "optax_compat.transforms", "optax_compat.losses",
              "optax_compat.contrib", "optax_compat.projections", "optax_compat.second_order",
              "optax_compat.perturbations", "optax_compat.assignment",
              "optax_compat.microbatching", "optax_compat.experimental",
              "optax_compat.experimental.aggregating", "optax_compat.testing",
              "optax_compat.capabilities", "optax_compat.memory"]
# Pages of the API reference whose functions and classes are optimizers, transformations,
# combinators or schedules, and the sections of those pages that list types instead.
EXAMPLE_PAGES = ["optax_compat/optimizers", "optax_compat/transformations",
                 "optax_compat/combining_optimizers", "optax_compat/optimizer_wrappers",
                 "optax_compat/optimizer_schedules", "optax_compat/contrib",
                 "optax_compat/experimental"]
TYPE_SECTIONS = {"Types", "States", "Schedule type"}


def _documented_objects():
    """One (name, object) per distinct public object of optax_compat with a ``>>>`` example."""
    seen = set()
    for namespace in NAMESPACES:
        module = pkgutil.resolve_name(namespace)
        names = getattr(module, "__all__", None) or [
            name for name in dir(module) if not name.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or id(obj) in seen or ">>>" not in (obj.__doc__ or ""):
                continue
            seen.add(id(obj))
            yield f"{namespace}.{name}", obj


EXAMPLES = dict(_documented_objects())


def _needs_example(obj):
    """Functions (``functools.partial`` aliases too) and classes other than types need one."""
    if inspect.isclass(obj):  # states, NamedTuple types and protocols are types
        return not hasattr(obj, "_fields") and not getattr(obj, "_is_protocol", False)
    return inspect.isroutine(obj) or isinstance(obj, functools.partial)


def _example_targets():
    sys.path.insert(0, str(DOCS))
    try:
        layout = importlib.import_module("api_layout")
    finally:
        sys.path.remove(str(DOCS))
    for slug, _, _, sections in layout.PAGES:
        if slug in EXAMPLE_PAGES:
            for heading, names in sections:
                if heading not in TYPE_SECTIONS:
                    yield from (name for name in names
                                if _needs_example(pkgutil.resolve_name(name)))


def test_every_public_function_at_the_top_level_has_an_example():
    import optax_compat

    functions = [name for name in dir(optax_compat) if not name.startswith("_") and (
        inspect.isfunction(getattr(optax_compat, name))
        or isinstance(getattr(optax_compat, name), functools.partial))]
    assert len(functions) > 150
    assert [name for name in functions
            if ">>>" not in (getattr(optax_compat, name).__doc__ or "")] == []


def test_every_optimizer_transform_combinator_and_schedule_has_an_example():
    targets = list(_example_targets())
    assert len(targets) > 100
    missing = [name for name in targets if ">>>" not in (pkgutil.resolve_name(name).__doc__ or "")]
    assert missing == []


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_docstring_example_runs(name):
    parser = doctest.DocTestParser()
    obj = EXAMPLES[name]
    defining = inspect.getmodule(getattr(obj, "func", obj))  # a partial's docstring is its own
    test = parser.get_doctest(obj.__doc__, dict(vars(defining)), name, None, 0)
    report = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=report.append)
    assert result.attempted > 0
    assert result.failed == 0, "".join(report)
