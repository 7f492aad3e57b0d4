"""Hypothesis strategies for testing gradient transformations (requires ``hypothesis``).

``pytrees`` and ``matching_trees`` draw parameters and gradients; ``hyperparameters``,
``transforms`` and ``schedules`` draw configurations of this package's own transformations.
"""

from optax_compat.testing._tree_strategies import (
    matching_trees,
    params_and_grads,
    pytrees,
    record_type,
    tensors,
)

__all__ = ["matching_trees", "params_and_grads", "pytrees", "record_type", "tensors"]
