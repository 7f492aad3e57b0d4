"""Distributed training over ``torch.distributed.rpc`` (TorchOpt's ``torchopt.distributed``).

:mod:`~torchopt_fn.distributed.world` tells who this worker is (from the variables ``torchrun``
sets) and starts RPC; :mod:`~torchopt_fn.distributed.api` runs a function on the workers with
its inputs partitioned and its results reduced; :mod:`~torchopt_fn.distributed.autograd`
differentiates through those calls. Importing this package does not start anything and works
on PyTorch builds without distributed support; :func:`is_available` tells whether it can run.
"""

import torch.distributed as dist
import torch.distributed.rpc as rpc

from torchopt_fn.distributed import api, autograd, world
from torchopt_fn.distributed.api import *  # noqa: F403
from torchopt_fn.distributed.world import *  # noqa: F403

__all__ = ["is_available", *api.__all__, *world.__all__]


def is_available() -> bool:
    """Whether ``torch.distributed``, its RPC framework and distributed autograd are built in."""
    return dist.is_available() and rpc.is_available() and autograd.is_available()
