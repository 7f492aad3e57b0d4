"""Differentiable meta-optimizers (``torchopt.optim.meta``)."""

from torchopt_fn.optim.meta.adadelta import MetaAdaDelta, MetaAdadelta
from torchopt_fn.optim.meta.adagrad import MetaAdaGrad, MetaAdagrad
from torchopt_fn.optim.meta.adam import MetaAdam
from torchopt_fn.optim.meta.adamax import MetaAdaMax, MetaAdamax
from torchopt_fn.optim.meta.adamw import MetaAdamW
from torchopt_fn.optim.meta.base import MetaOptimizer
from torchopt_fn.optim.meta.radam import MetaRAdam
from torchopt_fn.optim.meta.rmsprop import MetaRMSProp, MetaRMSprop
from torchopt_fn.optim.meta.sgd import MetaSGD

__all__ = [
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
