"""TorchOpt 0.7.3's public names and signatures exist in torchopt_fn."""

from __future__ import annotations

import inspect

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


@pytest.mark.parametrize("name", SIGNATURES)
def test_signatures_follow_torchopt(name):
    target = getattr(torchopt, name)
    function = target.__init__ if inspect.isclass(target) else target
    assert list(inspect.signature(function).parameters) == SIGNATURES[name].split()


def test_submodules_are_reachable():
    for module in ("alias", "base", "clip", "combine", "diff", "distributed", "hook", "linalg",
                   "linear_solve", "nn", "optim", "pytree", "schedule", "transform", "typing",
                   "visual"):
        assert getattr(torchopt, module).__name__ == f"torchopt_fn.{module}"
    assert torchopt.optim.meta.MetaAdam is torchopt.MetaAdam
    assert torchopt.Adamax is torchopt.AdaMax and torchopt.MetaRMSprop is torchopt.MetaRMSProp
