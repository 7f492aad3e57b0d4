"""Type aliases of TorchOpt's public ``torchopt.typing`` module."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias, TypeVar, runtime_checkable

import torch
from optree.typing import PyTree, PyTreeTypeVar
from torch import Tensor
from torch.distributions import Distribution
from torch.futures import Future

from torchopt_fn._tree_aliases import OptState, Params, TensorTree, Updates
from torchopt_fn.base import (
    ChainedGradientTransformation,
    EmptyState,
    GradientTransformation,
    UninitializedState,
)

__all__ = [
    "GradientTransformation",
    "ChainedGradientTransformation",
    "EmptyState",
    "UninitializedState",
    "Params",
    "Updates",
    "OptState",
    "Schedule",
    "ScalarOrSchedule",
    "Scalar",
    "Numeric",
    "PyTree",
    "Tensor",
    "OptionalTensor",
    "ListOfTensors",
    "TupleOfTensors",
    "SequenceOfTensors",
    "TensorOrTensors",
    "TensorTree",
    "ListOfOptionalTensors",
    "TupleOfOptionalTensors",
    "SequenceOfOptionalTensors",
    "OptionalTensorOrOptionalTensors",
    "OptionalTensorTree",
    "TensorContainer",
    "ModuleTensorContainers",
    "Future",
    "LinearSolver",
    "Device",
    "Size",
    "Distribution",
    "SampleFunc",
    "Samplable",
]

T = TypeVar("T")

Device: TypeAlias = torch.device | str | int

Scalar: TypeAlias = float | int | bool
Numeric: TypeAlias = Tensor | Scalar

Schedule: TypeAlias = Callable[[Numeric], Numeric]
ScalarOrSchedule: TypeAlias = float | Schedule

OptionalTensor: TypeAlias = Tensor | None

ListOfTensors = list[Tensor]
TupleOfTensors = tuple[Tensor, ...]
SequenceOfTensors = Sequence[Tensor]
TensorOrTensors: TypeAlias = Tensor | SequenceOfTensors

ListOfOptionalTensors = list[OptionalTensor]
TupleOfOptionalTensors = tuple[OptionalTensor, ...]
SequenceOfOptionalTensors = Sequence[OptionalTensor]
OptionalTensorOrOptionalTensors: TypeAlias = OptionalTensor | SequenceOfOptionalTensors
OptionalTensorTree: TypeAlias = PyTreeTypeVar(  # type: ignore[valid-type]
    "OptionalTensorTree", OptionalTensor)

TensorContainer = dict[str, Tensor | None]
ModuleTensorContainers = tuple[TensorContainer, ...]

# solver(matvec, b) -> solution of ``A x = b`` where ``matvec(x) = A x``.
LinearSolver: TypeAlias = Callable[[Callable[[TensorTree], TensorTree], TensorTree], TensorTree]

Size = torch.Size

# sample(sample_shape) -> a tensor (or a sequence of numbers) of shape ``sample_shape``.
SampleFunc: TypeAlias = Callable[[Size], Tensor | Sequence[Numeric]]


@runtime_checkable
class Samplable(Protocol):
    """Anything with a ``sample(sample_shape)`` method, e.g. a ``torch.distributions`` object."""

    @abc.abstractmethod
    def sample(self, sample_shape: Size = Size()) -> Tensor | Sequence[Numeric]:
        """Draws a sample of shape ``sample_shape`` (times the batch shape of the distribution)."""
        raise NotImplementedError


Samplable.register(Distribution)
