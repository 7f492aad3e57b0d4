"""Testing gradient transformations: the Optax oracle, property checks and tree assertions.

One comparison engine, used by this package's own test suite and by users:

* **Against real Optax** (JAX and Optax are imported only when a comparison runs):
  :func:`compare_with_optax` and :func:`check_matches_optax` run a transformation and Optax's
  side by side, step by step; :func:`compare_function_with_optax` compares functions such as
  losses, gradients included. :func:`to_jax`, :func:`to_torch`, :func:`jax_precision`,
  :func:`jit_optax` and :func:`state_signature` are their building blocks.
* **Properties** that need only PyTorch: :func:`check_pure`, :func:`check_state_stable`,
  :func:`check_differentiable`, :func:`check_compilable`, :func:`assert_inplace_matches_pure`.
* **Declarations** (:mod:`optax_compat.capabilities`), checked on data before a fast path
  trusts them: :func:`check_elementwise`, :func:`check_global_reduction`,
  :func:`check_per_leaf`, :func:`check_inplace`, and :func:`check_declarations`, which runs
  those a transformation's declarations call for.
* **Assertions** whose messages name the first offending path: :func:`assert_trees_all_close`,
  :func:`assert_leaves_close`, :func:`assert_tree_structure_equal`. Their tolerances follow
  the dtype of the values compared (:func:`.tolerance`): float32 values get float32's tolerance
  even inside a float64 test, so that comparisons pass on any CPU.
* **Data**: :func:`make_tree`, :func:`random_tree`, :func:`seeded_randn`, :func:`seeded_randint`.

The hypothesis strategies live in :mod:`optax_compat.testing.strategies`, which imports
hypothesis itself, so the library does not depend on hypothesis at run time::

    from hypothesis import given
    from optax_compat import testing
    from optax_compat.testing import strategies

    @given(strategies.params_and_grads(steps=1))
    def test_my_transform(params_and_grads):
        params, (grads,) = params_and_grads
        testing.check_pure(my_transform(), params, grads)
"""

from optax_compat.testing._asserts import (
    ATOL,
    RTOL,
    Tolerance,
    Tolerances,
    assert_leaves_close,
    assert_tree_structure_equal,
    assert_trees_all_close,
    tolerance,
)
from optax_compat.testing._data import make_tree, random_tree, seeded_randint, seeded_randn
from optax_compat.testing._declarations import (
    check_declarations,
    check_elementwise,
    check_global_reduction,
    check_inplace,
    check_per_leaf,
)
from optax_compat.testing._optax_oracle import (
    assert_same_state_types,
    check_matches_optax,
    compare_function_with_optax,
    compare_with_optax,
    jax_precision,
    jit_optax,
    state_signature,
    to_jax,
    to_numpy,
    to_torch,
)
from optax_compat.testing._properties import (
    assert_inplace_matches_pure,
    check_compilable,
    check_differentiable,
    check_pure,
    check_state_stable,
)

__all__ = [
    "ATOL",
    "RTOL",
    "Tolerance",
    "Tolerances",
    "assert_inplace_matches_pure",
    "assert_leaves_close",
    "assert_same_state_types",
    "assert_tree_structure_equal",
    "assert_trees_all_close",
    "check_compilable",
    "check_declarations",
    "check_differentiable",
    "check_elementwise",
    "check_global_reduction",
    "check_inplace",
    "check_matches_optax",
    "check_per_leaf",
    "check_pure",
    "check_state_stable",
    "compare_function_with_optax",
    "compare_with_optax",
    "jax_precision",
    "jit_optax",
    "make_tree",
    "random_tree",
    "seeded_randint",
    "seeded_randn",
    "state_signature",
    "to_jax",
    "to_numpy",
    "to_torch",
    "tolerance",
]
