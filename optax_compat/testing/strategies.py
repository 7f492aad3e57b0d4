"""Hypothesis strategies for testing gradient transformations (requires ``hypothesis``).

``pytrees``, ``matching_trees`` and ``params_and_grads`` draw parameters and gradients;
``hyperparameters``, ``schedules`` and ``transforms`` draw configurations of this package's
own transformations, printed as the code that builds them; ``programs`` draws whole optimizer
programs (combinators included) with their params and gradients, for differential testing.
"""

from optax_compat.testing._config import Config, DescribedSchedule
from optax_compat.testing._program_strategies import Program, grammar_names, programs
from optax_compat.testing._transform_strategies import (
    DrawnTransformation,
    hyperparameters,
    schedule_names,
    schedules,
    transform_names,
    transforms,
)
from optax_compat.testing._tree_strategies import (
    matching_trees,
    params_and_grads,
    pytrees,
    record_type,
    tensors,
)

__all__ = [
    "Config",
    "DescribedSchedule",
    "DrawnTransformation",
    "Program",
    "grammar_names",
    "hyperparameters",
    "matching_trees",
    "params_and_grads",
    "programs",
    "pytrees",
    "record_type",
    "schedule_names",
    "schedules",
    "tensors",
    "transform_names",
    "transforms",
]
