"""``torch.optim``-like optimizers (``torchopt.optim``)."""

from torchopt_fn.optim import func, meta
from torchopt_fn.optim.adadelta import AdaDelta, Adadelta
from torchopt_fn.optim.adagrad import AdaGrad, Adagrad
from torchopt_fn.optim.adam import Adam
from torchopt_fn.optim.adamax import AdaMax, Adamax
from torchopt_fn.optim.adamw import AdamW
from torchopt_fn.optim.base import Optimizer
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
from torchopt_fn.optim.radam import RAdam
from torchopt_fn.optim.rmsprop import RMSProp, RMSprop
from torchopt_fn.optim.sgd import SGD

__all__ = [
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
    "Optimizer",
    "FuncOptimizer",
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
]
