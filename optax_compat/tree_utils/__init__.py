"""Pytree utilities (mirrors ``optax.tree_utils``)."""

from optax_compat.tree_utils._casting import tree_cast, tree_cast_like, tree_dtype
from optax_compat.tree_utils._random import (
    tree_random_like,
    tree_split_key_like,
    tree_unwrap_random_key_data,
)
from optax_compat.tree_utils._state_utils import (
    NamedTupleKey,
    tree_get,
    tree_get_all_with_path,
    tree_map_params,
    tree_set,
)
from optax_compat.tree_utils._tree_math import (
    tree_add,
    tree_add_scale,
    tree_allclose,
    tree_batch_shape,
    tree_bias_correction,
    tree_clip,
    tree_conj,
    tree_div,
    tree_full_like,
    tree_max,
    tree_min,
    tree_mul,
    tree_norm,
    tree_ones_like,
    tree_real,
    tree_scale,
    tree_size,
    tree_sub,
    tree_sum,
    tree_update_infinity_moment,
    tree_update_moment,
    tree_update_moment_per_elem_norm,
    tree_vdot,
    tree_where,
    tree_zeros_like,
)

# isort: split
import functools as _functools

from optax_compat._src.deprecations import deprecation_getattr as _deprecation_getattr

_deprecations = {
    "tree_scalar_mul": (
        "optax.tree_utils.tree_scalar_mul is deprecated: use optax.tree_utils.tree_scale"
        " (optax v0.2.5 or newer).", tree_scale),
    # Optax's own message for this name also says tree_scalar_mul.
    "tree_add_scalar_mul": (
        "optax.tree_utils.tree_scalar_mul is deprecated: use optax.tree_utils.tree_scale"
        " (optax v0.2.5 or newer).", tree_add_scale),
    "tree_l1_norm": (
        "optax.tree_utils.tree_l1_norm is deprecated: use optax.tree_utils.tree_norm(..., ord=1)"
        " (optax v0.2.5 or newer).", _functools.partial(tree_norm, ord=1)),
    "tree_l2_norm": (
        "optax.tree_utils.tree_l2_norm is deprecated: use optax.tree_utils.tree_norm"
        " (optax v0.2.5 or newer).", _functools.partial(tree_norm, ord=2)),
    "tree_linf_norm": (
        "optax.tree_utils.tree_linf_norm is deprecated: use"
        " optax.tree_utils.tree_norm(..., ord=jnp.inf) (optax v0.2.5 or newer).",
        _functools.partial(tree_norm, ord="inf")),
}
__getattr__ = _deprecation_getattr(__name__, _deprecations)
del _deprecation_getattr
