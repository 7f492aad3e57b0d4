"""Pytrees as lists of leaves, and foreach arithmetic on them: the names call sites use as
``tm.<name>`` (``from optax_compat._runtime import tree_math as tm``), gathered from the modules.

Every transform flattens its trees once with optree, does its arithmetic on lists of leaves
(one ``torch._foreach_*`` call per operation for the whole tree, the hot path) and unflattens
once at the end; :mod:`.arithmetic` states the conventions (pure functions and their in-place
twins, scalars that never promote the leaves' dtypes).

* :mod:`.trees` — flattening and unflattening with optree (``flatten``, ``unflatten``,
  ``leaves``, ``treespec``, ``tree_map``, ``map_over_prefix``), the shortcuts that build tree
  structures while Dynamo traces (``traced_or_optree_flatten``, ``traced_flatten_one_level``),
  structure checks and the text of their errors (``leaves_like``, ``check_same_structure``,
  ``first_difference``), checks on lists of leaves (``float_leaves``, ``same_shapes``,
  ``same_dtypes``, ``is_recording``).
* :mod:`.distributed` — DTensor leaves (``is_distributed``, ``gathered``,
  ``reduced_for_storage``) and the flat vector of all leaves (``ravel``, ``unravel``).
* :mod:`.arithmetic` — the foreach kernels and scalar operands, elementwise arithmetic with each
  pure function followed by its in-place twin (``add``, ``add_``, ...), buffers
  and ``blocks`` for in-place steps, reductions (``sum_of_squares``, ``vdot``, ``norms``, ...).

``arithmetic`` imports ``distributed`` and ``trees``; ``distributed`` imports ``trees``. A test
that patches a module-level value (``BLOCK_ELEMENTS``) patches the module that reads it.
"""

from optax_compat._runtime.tree_math.arithmetic import (
    BLOCK_ELEMENTS,
    Scalar,
    ScalarOrLeaves,
    abs,
    abs_sq,
    add,
    add_,
    add_scaled,
    add_scaled_,
    addcdiv_,
    addcmul_,
    at_least,
    blocks,
    cast,
    clamp_,
    clone,
    copy_,
    div,
    div_,
    foreach,
    is_batched,
    map_stacked,
    maximum,
    minimum,
    mul,
    mul_,
    neg,
    neg_,
    norms,
    power,
    promoted,
    real_vdot,
    reciprocal_,
    root_mean_squares,
    rsqrt,
    scalar_like,
    sign,
    sign_,
    sqrt,
    sqrt_,
    square,
    sub,
    sum_of_squares,
    sum_scalars,
    vdot,
    where,
    widest_real_dtype,
    zeros_like,
)
from optax_compat._runtime.tree_math.distributed import (
    gathered,
    is_distributed,
    ravel,
    reduced_for_storage,
    unravel,
)
from optax_compat._runtime.tree_math.trees import (
    NAMESPACE,
    NONE_IS_LEAF,
    Leaves,
    attributes,
    check_is_tree,
    check_same_structure,
    first_difference,
    flatten,
    float_leaves,
    is_inexact,
    is_recording,
    leaves,
    leaves_like,
    map_over_prefix,
    path_str,
    same_dtypes,
    same_shapes,
    same_structure,
    traced_flatten_one_level,
    traced_or_optree_flatten,
    tree_map,
    treespec,
    unflatten,
)
