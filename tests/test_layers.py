"""The package's layers hold: ``optax_compat/_src`` mirrors Optax file by file, the PyTorch runtime
lives in ``optax_compat/_runtime``, ``torchopt_fn`` reaches only ``optax_compat``'s public API and
the runtime's declared interface, and no module imports itself back through another.
"""

import ast
import importlib.util
import pathlib
import re

import optax_compat._runtime as runtime

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: str) -> dict[str, pathlib.Path]:
    return {_module_name(path): path for path in sorted((ROOT / package).rglob("*.py"))}


def _imported(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The known modules ``path`` imports at module level (``TYPE_CHECKING`` blocks too): for
    ``from package import name`` the submodule ``package.name`` where there is one."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for statement in ast.parse(path.read_text()).body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                found.update(f"{base}.{alias.name}" for alias in node.names)
                found.add(base)
    resolved = set()
    for target in found:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def test_every_src_module_has_an_optax_counterpart():
    """A port diffs against ``optax/_src/<name>.py``; what has no such file lives elsewhere."""
    names = sorted(path.stem for path in (ROOT / "optax_compat/_src").glob("*.py"))
    assert names and (ROOT / "optax_compat/_src/__init__.py").exists() is False
    assert [name for name in names
            if importlib.util.find_spec(f"optax._src.{name}") is None] == []


def _private_modules_banned_for_torchopt_fn() -> list[str]:
    """Every private module of ``optax_compat`` (the first private component of its path) but
    the runtime's declared interface: its package namespace and the modules in
    ``optax_compat._runtime.INTERFACE_MODULES``."""
    banned = []
    for name in _modules("optax_compat"):
        parts = name.split(".")
        private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
        if private is None:
            continue
        head = ".".join(parts[:private + 1])
        if head == "optax_compat._runtime":
            if len(parts) > private + 1 and parts[private + 1] not in runtime.INTERFACE_MODULES:
                banned.append(".".join(parts[:private + 2]))
        else:
            banned.append(head)
    return sorted(set(banned))


def test_torchopt_fns_ruff_rule_bans_every_private_module_outside_the_runtime_interface():
    config = (ROOT / "torchopt_fn/ruff.toml").read_text()  # (tomllib is Python 3.11+)
    assert re.search(r'^extend-select = \["TID251"\]$', config, re.M)
    banned = re.findall(r'^"([\w.]+)"\.msg = ', config, re.M)
    assert sorted(banned) == _private_modules_banned_for_torchopt_fn()


def test_torchopt_fn_imports_only_public_names_and_the_runtime_interface():
    known = set(_modules("optax_compat"))
    banned = _private_modules_banned_for_torchopt_fn()
    offending = {
        name: sorted(target for target in _imported(name, path, known)
                     if any(target == b or target.startswith(b + ".") for b in banned))
        for name, path in _modules("torchopt_fn").items()}
    assert {name: targets for name, targets in offending.items() if targets} == {}


def test_no_module_imports_itself_back():
    """No cycle of module-level imports between modules (package ``__init__`` files, which
    gather their submodules' names, are left out: a cycle through one is not a dependency)."""
    modules = {**_modules("optax_compat"), **_modules("torchopt_fn")}
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph = {name: _imported(name, path, set(modules)) - packages
             for name, path in modules.items() if name not in packages}
    cycles, done = [], set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append([*trail[trail.index(name):], name])
            return
        if name in done:
            return
        for target in sorted(graph.get(name, ())):
            visit(target, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_uses_another_modules_private_names():
    """A function, class or constant one module takes from another has a public name (private
    *modules*, such as ``optax_compat._runtime``, are the layers; their names are not)."""
    modules = {**_modules("optax_compat"), **_modules("torchopt_fn")}
    offending = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}  # a local name bound to one of our modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    if target in modules:
                        aliases[alias.asname or alias.name] = target
                    elif node.module in modules and _private(alias.name):
                        offending.append(f"{name}: from {node.module} import {alias.name}")
            elif isinstance(node, ast.Import):
                aliases.update({alias.asname: alias.name for alias in node.names
                                if alias.asname and alias.name in modules})
        offending.extend(
            f"{name}: {node.value.id}.{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id in aliases and _private(node.attr)
            and f"{aliases[node.value.id]}.{node.attr}" not in modules)
    assert offending == []
