"""TorchOpt's API for differentiable optimization, built on :mod:`optax_compat`.

``import torchopt_fn as torchopt`` gives TorchOpt 0.7.3's public names on current PyTorch.
"""

from torchopt_fn import (
    accelerated_op,
    alias,
    base,
    clip,
    combine,
    diff,
    distributed,
    hook,
    linalg,
    linear_solve,
    nn,
    optim,
    pytree,
    schedule,
    transform,
    typing,
)
from torchopt_fn.accelerated_op import is_available as accelerated_op_available
from torchopt_fn.alias import adadelta, adagrad, adam, adamax, adamw, radam, rmsprop, sgd
from torchopt_fn.clip import clip_grad_norm
from torchopt_fn.combine import chain
from torchopt_fn.hook import register_hook
from torchopt_fn.optim import (
    SGD,
    AdaDelta,
    Adadelta,
    AdaGrad,
    Adagrad,
    Adam,
    AdaMax,
    Adamax,
    AdamW,
    Optimizer,
    RAdam,
    RMSProp,
    RMSprop,
)
from torchopt_fn.optim.func import FuncOptimizer
from torchopt_fn.optim.meta import (
    MetaAdaDelta,
    MetaAdadelta,
    MetaAdaGrad,
    MetaAdagrad,
    MetaAdam,
    MetaAdaMax,
    MetaAdamax,
    MetaAdamW,
    MetaOptimizer,
    MetaRAdam,
    MetaRMSProp,
    MetaRMSprop,
    MetaSGD,
)
from torchopt_fn.transform import nan_to_num
from torchopt_fn.update import apply_updates
from torchopt_fn.utils import (
    extract_state_dict,
    module_clone,
    module_detach_,
    recover_state_dict,
    stop_gradient,
)
from torchopt_fn.version import __version__


def __getattr__(name: str) -> object:
    """``torchopt_fn.visual`` on first access: it needs graphviz, so it is not imported eagerly."""
    if name == "visual":
        import importlib

        return importlib.import_module("torchopt_fn.visual")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "accelerated_op_available",
    "adam",
    "adamax",
    "adadelta",
    "radam",
    "adamw",
    "adagrad",
    "rmsprop",
    "sgd",
    "clip_grad_norm",
    "nan_to_num",
    "register_hook",
    "chain",
    "Optimizer",
    "SGD",
    "Adam",
    "AdaMax",
    "Adamax",
    "AdaDelta",
    "Adadelta",
    "RAdam",
    "AdamW",
    "AdaGrad",
    "Adagrad",
    "RMSProp",
    "RMSprop",
    "MetaOptimizer",
    "MetaSGD",
    "MetaAdam",
    "MetaAdaMax",
    "MetaAdamax",
    "MetaAdaDelta",
    "MetaAdadelta",
    "MetaRAdam",
    "MetaAdamW",
    "MetaAdaGrad",
    "MetaAdagrad",
    "MetaRMSProp",
    "MetaRMSprop",
    "FuncOptimizer",
    "apply_updates",
    "extract_state_dict",
    "recover_state_dict",
    "stop_gradient",
    "module_clone",
    "module_detach_",
]
