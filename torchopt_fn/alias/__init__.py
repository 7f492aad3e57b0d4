"""TorchOpt's optimizer aliases with PyTorch-style arguments (``torchopt.alias``)."""

from torchopt_fn.alias.adadelta import adadelta
from torchopt_fn.alias.adagrad import adagrad
from torchopt_fn.alias.adam import adam
from torchopt_fn.alias.adamax import adamax
from torchopt_fn.alias.adamw import adamw
from torchopt_fn.alias.radam import radam
from torchopt_fn.alias.rmsprop import rmsprop
from torchopt_fn.alias.sgd import sgd

__all__ = ["adam", "adamax", "adadelta", "radam", "adamw", "adagrad", "rmsprop", "sgd"]
