"""The building blocks every transformation of this package is written with.

* :mod:`.tree_math` — arithmetic over the leaves of pytrees with ``torch._foreach_*`` (the hot
  path), structure checks and reductions.
* :mod:`.numbers` — which hyper-parameters are plain Python numbers.
* :mod:`.dtypes` — dtype arguments as JAX code writes them; JAX's default precision (x64 mode)
  and the weak-type rule for scalars.
* :mod:`.state` — creating state buffers from params and reading them back, checked.
* :mod:`.moments` — moving averages and bias corrections (Adam and relatives).
* :mod:`.inplace` — the opt-in in-place path and how the request travels.
* :mod:`.flat_safe` — which transformations may run on flat or stacked buffers
  (:func:`optax_compat.fused_step`).
* :mod:`.none_gradients` — ``None`` gradients (PyTorch's unused parameters), for every
  transformation at once.

A transformation in five lines (Optax's shape, run on foreach kernels)::

    def scale_by_momentum(decay):
        def init(params):
            return bb.zeros(params)
        def update(updates, state, params=None):
            gs, spec = tm.float_leaves(updates)
            moments = bb.update_moment(bb.state_leaves(state, spec, updates, "state"), gs, decay)
            return tm.unflatten(spec, moments), tm.unflatten(spec, moments)
        return base.GradientTransformation(init, update)
"""

from optax_compat._src.building_blocks import tree_math
from optax_compat._src.building_blocks.dtypes import (
    as_strong,
    as_weak,
    canonical_dtype,
    default_float,
    default_int,
    is_weak,
    result_dtype,
)
from optax_compat._src.building_blocks.flat_safe import (
    FLAT,
    LAYOUTS,
    STACKED,
    elementwise,
    elementwise_if,
    global_reduction,
    per_leaf,
    why_not,
)
from optax_compat._src.building_blocks.inplace import (
    declares_inplace,
    supports_inplace,
    without_inplace_request,
)
from optax_compat._src.building_blocks.moments import (
    adam_ratio,
    bias_correction,
    debias,
    first_moment,
    update_moment,
)
from optax_compat._src.building_blocks.none_gradients import (
    Pruning,
    present_pairs,
    pruning,
    tolerates_none,
    tolerates_none_step,
)
from optax_compat._src.building_blocks.numbers import (
    check_hyperparameter,
    is_number,
    is_one,
    is_zero,
)
from optax_compat._src.building_blocks.state import (
    NO_PARAMS_MSG,
    device_of,
    emit,
    full,
    in_blocks,
    params_leaves,
    state_leaves,
    store,
    zero_count,
    zeros,
)
