"""Builds the documentation site with warnings as errors and checks that it documents every name.

The build (``python -m sphinx -W --keep-going -j 1 -b html docs <tmp>``) runs once, in a
subprocess, on this source tree. It fails on any warning: a broken cross-reference, a
docstring that is not valid reStructuredText, or a public name missing from the API reference
(``docs/_ext/apiref.py`` warns about those). The checks below then read the built site's
inventory, computing the public names independently of the docs' own code. Notebooks are
rendered from their stored outputs, never executed here (``tests/test_notebooks.py`` runs them).
"""

import __future__

import collections.abc
import importlib
import inspect
import os
import pathlib
import pkgutil
import subprocess
import sys
import typing

from sphinx.util.inventory import InventoryFile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("optax_compat", "torchopt_fn")


def _build(out: pathlib.Path) -> pathlib.Path:
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-j", "1", "-q", "-b",
               "html", "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-5000:]
    return out / "html"




def _public(module) -> list[str]:
    """``__all__``, else the attributes without a leading underscore, less the names a module
    imports only for its annotations (``annotations``, ``typing.Any``, ...)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [name for name in dir(module) if not name.startswith("_")
            and not isinstance(getattr(module, name), __future__._Feature)
            and not any(getattr(helper, name, None) is getattr(module, name)
                        for helper in (typing, collections.abc))]


def public_namespaces() -> set[str]:
    """The packages, their public subpackages, and the public modules they export by name."""
    found = set(PACKAGES)
    for top in PACKAGES:
        package = importlib.import_module(top)
        found |= {info.name for info in pkgutil.walk_packages(package.__path__, prefix=f"{top}.")
                  if info.ispkg and not any(part.startswith("_") for part in info.name.split("."))}
    pending = sorted(found)
    while pending:
        namespace = pending.pop()
        module = pkgutil.resolve_name(namespace)
        exported = set(getattr(module, "__all__", ()))
        for name in _public(module) if namespace not in PACKAGES else dir(module):
            value = getattr(module, name)
            dotted = f"{namespace}.{name}"
            # A module is public where it is a top package's attribute, is named in
            # ``__all__``, or is the submodule of that name (not a helper module imported).
            if (inspect.ismodule(value) and not name.startswith("_") and dotted not in found
                    and value.__name__.split(".")[0] in PACKAGES
                    and (namespace in PACKAGES or name in exported or value.__name__ == dotted)):
                found.add(dotted)
                pending.append(dotted)
    return {namespace for namespace in found
            if any(not inspect.ismodule(getattr(pkgutil.resolve_name(namespace), name))
                   for name in _public(pkgutil.resolve_name(namespace)))}


def _inventory(site: pathlib.Path) -> dict[str, set[str]]:
    with open(site / "objects.inv", "rb") as stream:
        inventory = InventoryFile.load(stream, "", lambda base, uri: uri)
    return {kind: set(entries) for kind, entries in inventory.items()}


def _check_namespaces(site: pathlib.Path) -> None:
    modules = _inventory(site)["py:module"]
    assert public_namespaces() - modules == set()


def _check_names(site: pathlib.Path) -> None:
    inventory = _inventory(site)
    documented = set().union(*(names for kind, names in inventory.items()
                               if kind.startswith("py:")))
    public = {f"{namespace}.{name}" for namespace in public_namespaces()
              for name in _public(pkgutil.resolve_name(namespace))
              if not inspect.ismodule(getattr(pkgutil.resolve_name(namespace), name))}
    assert len(public) > 500
    assert public - documented == set()


def _check_notebooks(site: pathlib.Path) -> None:
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    for notebook in notebooks:
        page = (site / "notebooks" / f"{notebook.stem}.html").read_text()
        assert "cell_output" in page, notebook.stem


def _check_benchmarks(site: pathlib.Path) -> None:
    for script, page in (("bench_all", "all"), ("bench_step", "step"), ("bench_fused", "fused"),
                         ("bench_contrib", "contrib"), ("bench_muon", "muon"),
                         ("bench_visual", "visual"), ("bench_iteration", "iteration")):
        results = (ROOT / "benchmarks" / "results" / f"{script}.md").read_text()
        row = results.strip().splitlines()[-1].split("|")[1].strip()
        assert f"benchmarks/{script}.py" in results
        assert row in (site / "benchmarks" / f"{page}.html").read_text(), script


def test_site_builds_and_documents_every_public_name(tmp_path: pathlib.Path) -> None:
    """One test, so that parallel workers do not build the site twice."""
    site = _build(tmp_path)
    _check_namespaces(site)  # every public module has a page
    _check_names(site)  # every public name has an entry
    _check_notebooks(site)  # rendered with their stored outputs
    _check_benchmarks(site)  # the pages show the results files the scripts wrote
