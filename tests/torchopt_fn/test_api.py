"""TorchOpt 0.7.3's public names and signatures exist in torchopt_fn."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

import torchopt_fn as torchopt

TORCHOPT_ALL = [
    "accelerated_op_available", "adam", "adamax", "adadelta", "radam", "adamw", "adagrad",
    "rmsprop", "sgd", "clip_grad_norm", "nan_to_num", "register_hook", "chain", "Optimizer",
    "SGD", "Adam", "AdaMax", "Adamax", "AdaDelta", "Adadelta", "RAdam", "AdamW", "AdaGrad",
    "Adagrad", "RMSProp", "RMSprop", "MetaOptimizer", "MetaSGD", "MetaAdam", "MetaAdaMax",
    "MetaAdamax", "MetaAdaDelta", "MetaAdadelta", "MetaRAdam", "MetaAdamW", "MetaAdaGrad",
    "MetaAdagrad", "MetaRMSProp", "MetaRMSprop", "FuncOptimizer", "apply_updates",
    "extract_state_dict", "recover_state_dict", "stop_gradient", "module_clone",
    "module_detach_",
]

# TorchOpt 0.7.3's parameter names, in order.
SIGNATURES = {
    "sgd": "lr momentum dampening weight_decay nesterov moment_requires_grad maximize",
    "adam": "lr betas eps weight_decay eps_root moment_requires_grad maximize use_accelerated_op",
    "adamw": "lr betas eps weight_decay eps_root mask moment_requires_grad maximize "
             "use_accelerated_op",
    "adamax": "lr betas eps weight_decay moment_requires_grad",
    "adadelta": "lr rho eps weight_decay moment_requires_grad",
    "adagrad": "lr lr_decay weight_decay initial_accumulator_value eps maximize",
    "radam": "lr betas eps weight_decay moment_requires_grad",
    "rmsprop": "lr alpha eps weight_decay momentum centered initial_scale nesterov maximize",
    "apply_updates": "params updates inplace",
    "clip_grad_norm": "max_norm norm_type error_if_nonfinite",
    "extract_state_dict": "target by device with_buffers detach_buffers enable_visual "
                          "visual_prefix",
    "module_clone": "target by detach_buffers device",
    "SGD": "self params lr momentum weight_decay dampening nesterov maximize",
    "MetaSGD": "self module lr momentum weight_decay dampening nesterov moment_requires_grad "
               "maximize",
    "MetaAdam": "self module lr betas eps weight_decay eps_root moment_requires_grad maximize "
                "use_accelerated_op",
    "FuncOptimizer": "self impl inplace",
}


def test_all_torchopt_top_level_names_exist():
    assert sorted(torchopt.__all__) == sorted(TORCHOPT_ALL)
    assert [name for name in TORCHOPT_ALL if not hasattr(torchopt, name)] == []
    assert torchopt.__version__ == "0.7.3"


# Ours, after TorchOpt's parameters and keyword-only: ``fused=True`` (the fused engine).
EXTENSIONS = {"fused"}


@pytest.mark.parametrize("name", SIGNATURES)
def test_signatures_follow_torchopt(name):
    target = getattr(torchopt, name)
    function = target.__init__ if inspect.isclass(target) else target
    parameters = inspect.signature(function).parameters
    theirs = SIGNATURES[name].split()
    assert list(parameters)[:len(theirs)] == theirs
    extra = list(parameters.values())[len(theirs):]
    assert {p.name for p in extra} <= EXTENSIONS
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extra)


def test_submodules_are_reachable():
    for module in ("alias", "base", "clip", "combine", "diff", "distributed", "hook", "linalg",
                   "linear_solve", "nn", "optim", "pytree", "schedule", "transform", "typing",
                   "visual"):
        assert getattr(torchopt, module).__name__ == f"torchopt_fn.{module}"
    assert torchopt.optim.meta.MetaAdam is torchopt.MetaAdam
    assert torchopt.Adamax is torchopt.AdaMax and torchopt.MetaRMSprop is torchopt.MetaRMSProp


def _imported_modules(path: pathlib.Path, name: str, modules: set[str]) -> set[str]:
    """The torchopt_fn modules that ``name`` (at ``path``) imports, at run time or lazily
    (``if TYPE_CHECKING:`` blocks aside); ``from package import module`` counts as the module."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test).endswith("TYPE_CHECKING")
                   for node in ast.walk(block)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                         for alias in node.names)
    imported = set()
    for module in found:
        while module and module not in modules:
            module = module.rpartition(".")[0]
        # A module's own packages are imported before it, not by it.
        if module and not name.startswith(module + ".") and module != name:
            imported.add(module)
    return imported


def test_modules_import_each_other_without_a_cycle():
    root = pathlib.Path(torchopt.__file__).parent
    paths = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _imported_modules(path, name, set(paths)) for name, path in paths.items()}
    assert "torchopt_fn.base" in graph["torchopt_fn.optim.base"]  # the graph reads imports

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for module in graph[todo.pop()] - seen:
                seen.add(module)
                todo.append(module)
        return seen

    cycles = sorted(name for name in graph if name in reachable(name))
    assert cycles == []
