"""Linear assignment solvers (mirrors ``optax.assignment``)."""

from optax_compat.assignment._hungarian_algorithm import (
    base_hungarian_algorithm,
    hungarian_algorithm,
)
