"""Property-based testing of gradient transformations, for this package and its users.

The checks here need only PyTorch (and real Optax for :func:`check_matches_optax`). The
hypothesis strategies live in :mod:`optax_compat.testing.strategies`, which imports hypothesis
itself, so the library does not depend on hypothesis at run time::

    from hypothesis import given
    from optax_compat import testing
    from optax_compat.testing import strategies

    @given(strategies.params_and_grads(steps=1))
    def test_my_transform(params_and_grads):
        params, (grads,) = params_and_grads
        testing.check_pure(my_transform(), params, grads)
"""

from optax_compat.testing._asserts import assert_tree_structure_equal, assert_trees_all_close
from optax_compat.testing._optax_oracle import check_matches_optax
from optax_compat.testing._properties import (
    check_compilable,
    check_differentiable,
    check_pure,
    check_state_stable,
)

__all__ = [
    "assert_tree_structure_equal",
    "assert_trees_all_close",
    "check_compilable",
    "check_differentiable",
    "check_matches_optax",
    "check_pure",
    "check_state_stable",
]
