"""flatten (``transforms/_layouts.py``) against real Optax and the unflattened transform."""

import optax
import pytest

import optax_compat as ox
from optax_compat.testing import compare_with_optax, make_tree
from tests.optax_compat.combinator_cases import CASES_AND_DTYPES, INNER_CASES, jitted


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_flatten_matches_optax_and_the_unflattened_transform(case, dtype):
    ours, theirs = INNER_CASES[case]
    compare_with_optax(ox.flatten(ours()), lambda: jitted(optax.flatten(theirs())), dtype,
                       steps=3)
    params = make_tree(dtype)
    grads = make_tree(dtype, seed=1)
    flat_tx, tx = ox.flatten(ours()), ours()
    flat_updates, _ = flat_tx.update(grads, flat_tx.init(params), params)
    updates, _ = tx.update(grads, tx.init(params), params)
    ox.testing.assert_trees_all_close(flat_updates, updates, rtol=1e-6, atol=1e-7)
