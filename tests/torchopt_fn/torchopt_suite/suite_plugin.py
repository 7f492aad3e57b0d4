"""Pytest plugin for running TorchOpt 0.7.3's own tests (``-p suite_plugin``).

Environment:

* ``SUITE_ALIAS_TORCHOPT=1``: every ``torchopt`` / ``torchopt.x.y`` import resolves to the very
  module objects of ``torchopt_fn`` / ``torchopt_fn.x.y`` (one class per name, so isinstance works).
* ``SUITE_SAMPLE=k``: keep the collected tests whose CRC-32 of the node id is 0 modulo k, and
  at least one parametrization of every test function (a deterministic sample that does not
  depend on collection order).
* ``SUITE_REPORT=path``: write ``{node id: outcome}`` as JSON, updated after every test.

Node ids are used without the memory addresses that some parametrization ids contain.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import zlib
from types import ModuleType

import pytest


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: ModuleType) -> None:
        self.target = target
        self.target_spec = target.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.target

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.target_spec  # the import system overwrote it with the alias spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Resolves ``alias`` and ``alias.*`` to the already-importable package ``target``."""

    def __init__(self, alias: str, target: str) -> None:
        self.alias, self.target = alias, target

    def find_spec(self, name: str, path: object = None, target: object = None):
        if name != self.alias and not name.startswith(self.alias + '.'):
            return None
        module = importlib.import_module(self.target + name[len(self.alias) :])
        is_package = hasattr(module, '__path__')
        return importlib.machinery.ModuleSpec(name, _AliasLoader(module), is_package=is_package)


if os.environ.get('SUITE_ALIAS_TORCHOPT') == '1':
    sys.meta_path.insert(0, _AliasFinder('torchopt', 'torchopt_fn'))

_OUTCOMES: dict[str, str] = {}
_ADDRESS = re.compile(r' at 0x[0-9a-fA-F]+')


def stable_id(nodeid: str) -> str:
    """The node id without memory addresses (parametrizations by function object show them)."""
    return _ADDRESS.sub('', nodeid)


def _sampled(items: list[pytest.Item], k: int) -> list[pytest.Item]:
    """The items whose node id hashes to 0 modulo ``k``, and at least one per test function."""
    by_function: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_function.setdefault(item.nodeid.split('[')[0], []).append(item)
    kept = set()
    for group in by_function.values():
        hashes = [zlib.crc32(stable_id(item.nodeid).encode()) for item in group]
        chosen = [item for item, h in zip(group, hashes) if h % k == 0]
        kept.update(map(id, chosen or [group[hashes.index(min(hashes))]]))
    return [item for item in items if id(item) in kept]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept = _sampled(items, int(os.environ.get('SUITE_SAMPLE', '1')))
    kept_ids = set(map(id, kept))
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
    items[:] = kept


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == 'call' or report.outcome != 'passed':
        nodeid = stable_id(report.nodeid)
        if _OUTCOMES.get(nodeid, 'passed') == 'passed':
            _OUTCOMES[nodeid] = report.outcome
    path = os.environ.get('SUITE_REPORT')
    if path and report.when == 'teardown':  # after every test, so a timeout loses nothing
        with open(path, 'w') as f:
            json.dump(_OUTCOMES, f, indent=0, sort_keys=True)
