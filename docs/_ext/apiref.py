"""Generate the API reference from ``docs/api_layout.py`` and the packages' public names.

At ``builder-inited`` this writes one reStructuredText page per topic of the layout (Optax's and
TorchOpt's grouping: optimizers, transformations, combinators, schedules, ...) and one page per
public namespace into ``docs/api/`` (generated, not committed). A topic page documents each listed
name with autodoc. A namespace page lists every public name of its module and links it to the
entry that documents its object; a name whose object is documented under another path (a
re-export, such as ``optax_compat.schedules.linear_schedule`` and ``optax_compat.linear_schedule``)
gets a short entry pointing there, and a re-export of another library (optree's functions in
``torchopt_fn.pytree``) says so. A public name that is neither listed nor a re-export is a
warning, so ``sphinx -W`` fails until the layout gives it a page.
"""

from __future__ import annotations
import __future__

import collections.abc
import importlib
import inspect
import itertools
import pathlib
import pkgutil
import re
import sys
import typing
from collections.abc import Iterator
from typing import Any

from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
DOCS = pathlib.Path(__file__).resolve().parent.parent
OWN_PACKAGES = ("optax_compat", "torchopt_fn")


def _layout() -> Any:
    sys.path.insert(0, str(DOCS))
    try:
        return importlib.import_module("api_layout")
    finally:
        sys.path.remove(str(DOCS))




def public_names(namespace: str) -> list[str]:
    """The public names of a namespace: its ``__all__``, else its non-underscore attributes.

    Modules are left out (each public module is a namespace of its own). A module without
    ``__all__`` also shows what it imported for its annotations (``from __future__ import
    annotations``, ``typing.Any``, ``collections.abc.Sequence``); those are left out too.
    """
    module = pkgutil.resolve_name(namespace)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name in dir(module) if not name.startswith("_")
                 and not isinstance(getattr(module, name), __future__._Feature)
                 and not any(getattr(helper, name, None) is getattr(module, name)
                             for helper in (typing, collections.abc))]
    return [name for name in names if not inspect.ismodule(getattr(module, name))]


def all_public_names(namespaces: list[str]) -> Iterator[str]:
    for namespace in namespaces:
        for name in public_names(namespace):
            yield f"{namespace}.{name}"


def _is_identity_comparable(obj: Any) -> bool:
    """Functions and classes are the same object when re-exported; constants may merely be equal."""
    return inspect.isclass(obj) or callable(obj)


def _is_own(obj: Any) -> bool:
    return getattr(obj, "__module__", "").split(".")[0] in OWN_PACKAGES


def _kind(obj: Any) -> tuple[str, str]:
    """(autodoc directive, py domain role) for ``obj``; another library's class is data here."""
    if inspect.isclass(obj) and _is_own(obj):
        return "autoclass", "class"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "autofunction", "func"
    return "autodata", "data"


def _alias_entry(name: str, obj: Any, text: str) -> list[str]:
    """A py-domain entry for ``name`` that only says where ``obj`` is documented."""
    directive = {"class": "py:class", "func": "py:function", "data": "py:data"}[_kind(obj)[1]]
    return [f".. {directive}:: {name}", "   :no-index-entry:", "", f"   {text}", ""]


def _entry(name: str, obj: Any) -> list[str]:
    directive, _ = _kind(obj)
    lines = [f".. {directive}:: {name}"]
    if directive == "autoclass" and not hasattr(obj, "_fields"):
        lines.append("   :members:")
    return [*lines, ""]


def _heading(text: str, underline: str) -> list[str]:
    return [text, underline * len(text), ""]


def _topic_page(title: str, intro: str, sections: list[tuple[str, list[str]]],
                canonical: dict[int, str]) -> list[str]:
    lines = _heading(title, "=")
    if intro:
        lines += [intro.strip(), ""]
    # One summary table per namespace, in that module's context, so that the summaries'
    # short cross-references (":func:`adam`") resolve as they do in the entries.
    names = [name for _, section in sections for name in section]
    for namespace, group in itertools.groupby(names, key=lambda name: name.rsplit(".", 1)[0]):
        lines += [f".. py:currentmodule:: {namespace}", "", ".. autosummary::",
                  "   :nosignatures:", ""]
        lines += [f"   {name.rsplit('.', 1)[1]}" for name in group] + [""]
    lines += [".. py:currentmodule:: None", ""]
    for section, names in sections:
        lines += _heading(section, "-")
        for name in names:
            obj = pkgutil.resolve_name(name)
            target = canonical[id(obj)] if _is_identity_comparable(obj) else name
            if target == name:
                lines += _entry(name, obj)
            else:
                lines += _alias_entry(name, obj, f"Same object as :{_kind(obj)[1]}:`{target}`.")
    return lines


def _namespace_page(namespace: str, canonical: dict[int, str], documented: set[str]) -> list[str]:
    module = pkgutil.resolve_name(namespace)
    lines = _heading(f"``{namespace}``", "=")
    lines += [f".. py:module:: {namespace}", ""]
    summary = (inspect.getdoc(module) or "").split("\n\n")[0]
    if summary:
        lines += [summary, ""]
    rows, aliases = [], []
    for name in public_names(namespace):
        dotted, obj = f"{namespace}.{name}", getattr(module, name)
        _, role = _kind(obj)
        if dotted in documented:
            rows.append((name, f":{role}:`{dotted}`"))
            continue
        target = canonical.get(id(obj)) if _is_identity_comparable(obj) else None
        if target is not None:
            text = f"Same object as :{role}:`{target}`."
        elif _is_identity_comparable(obj) and not _is_own(obj):
            text = f"Re-export of ``{obj.__module__}.{obj.__qualname__}`` from its own library."
        else:
            LOGGER.warning("public name %s has no page in the API reference: list it in "
                           "docs/api_layout.py", dotted, type="apiref", subtype="missing")
            continue
        rows.append((name, f":{role}:`{dotted}`"))
        aliases.append((name, obj, text))
    if rows:
        lines += [".. list-table::", "   :widths: 30 70", ""]
        for name, link in rows:
            lines += [f"   * - ``{name}``", f"     - {link}"]
        lines.append("")
    if aliases:
        lines += _heading("Re-exports", "-")
        for name, obj, text in aliases:
            lines += _alias_entry(name, obj, text)
    return lines


def generate(app: Sphinx) -> None:
    """Write ``docs/api/**.rst`` from the layout; warn about names without a page."""
    layout = _layout()
    out = DOCS / "api"
    canonical: dict[int, str] = {}
    documented: set[str] = set()
    for _slug, _title, _intro, sections in layout.PAGES:
        for _, names in sections:
            for name in names:
                try:
                    obj = pkgutil.resolve_name(name)
                except (AttributeError, ImportError):
                    LOGGER.warning("docs/api_layout.py lists %s, which does not exist", name,
                                   type="apiref", subtype="unknown")
                    continue
                documented.add(name)
                if _is_identity_comparable(obj):
                    canonical.setdefault(id(obj), name)
    pages = {slug: _topic_page(title, intro, sections, canonical)
             for slug, title, intro, sections in layout.PAGES}
    for namespace in layout.NAMESPACES:
        pages[f"namespaces/{namespace}"] = _namespace_page(namespace, canonical, documented)
    for slug, lines in pages.items():
        path = out / f"{slug}.rst"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "\n".join(lines) + "\n"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    index = [*_heading("API reference", "="), layout.INTRO.strip(), ""]
    for caption, slugs in layout.TOC:
        index += [".. toctree::", f"   :caption: {caption}", "   :maxdepth: 1", ""]
        index += [f"   {slug}" for slug in slugs] + [""]
    index += [".. toctree::", "   :caption: By module", "   :maxdepth: 1", ""]
    index += [f"   namespaces/{namespace}" for namespace in layout.NAMESPACES] + [""]
    (out / "index.rst").write_text("\n".join(index) + "\n")


def _attribute_doc(obj: Any, name: str) -> list[str] | None:
    """The ``#:`` comment above the assignment that defines the constant ``obj`` as ``name``."""
    for module_name, module in list(sys.modules.items()):
        if (module_name.split(".")[0] in OWN_PACKAGES
                and getattr(module, name, None) is obj
                and module.__dict__.get("__file__")):
            docs = ModuleAnalyzer.for_module(module_name).find_attr_docs().get(("", name))
            if docs:
                return list(docs)
    return None


def _constant_docstring(app: Sphinx, what: str, name: str, obj: Any, options: Any,
                        lines: list[str]) -> None:
    """Give a constant its ``#:`` comment instead of the docstring of its type (``dict``'s)."""
    inherited = {(inspect.getdoc(kind) or "").strip()
                 for kind in (type(obj), getattr(obj, "__origin__", None)) if kind is not None}
    if what == "data" and lines and "\n".join(lines).strip() in inherited:
        lines[:] = _attribute_doc(obj, name.rsplit(".", 1)[-1]) or []


def _qualify_annotations(app: Sphinx, what: str, name: str, obj: Any, options: Any,
                         signature: str | None, return_annotation: str | None
                         ) -> tuple[str | None, str | None]:
    """Replace bare annotation names listed in ``apiref_qualified_annotations`` by their paths."""
    package = getattr(obj, "__module__", None) or ""
    names = app.config.apiref_qualified_annotations.get(package.split(".")[0], {})

    def qualify(text: str | None) -> str | None:
        if text is None:
            return None
        for bare, dotted in names.items():
            text = re.sub(rf"(?<![\w.]){bare}\b", dotted, text)
        return text
    return qualify(signature), qualify(return_annotation)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("apiref_qualified_annotations", {}, "env")
    app.connect("builder-inited", generate)
    app.connect("autodoc-process-signature", _qualify_annotations)
    app.connect("autodoc-process-docstring", _constant_docstring)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
