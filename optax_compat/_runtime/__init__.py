"""The PyTorch runtime beneath the Optax mirror: building blocks and engines.

It holds the building blocks transformations are written with, the engines (the Adam engine,
``fused_step`` and its Inductor passes, the ``torch.optim`` adapter, checkpoints) and their
plumbing. How the layers stack, in one picture: ``docs/guides/architecture.md``.

Transformations are written with the building blocks, which this package's namespace gathers
(``from optax_compat import _runtime as bb``):

* :mod:`.tree_math` — arithmetic over the leaves of pytrees with ``torch._foreach_*`` (the hot
  path), structure checks and reductions: a package of ``trees``, ``distributed`` and
  ``arithmetic``, whose names it gathers (``tm.<name>``).
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

``torchopt_fn`` is built on ``optax_compat``'s public API and on this package's interface only:
its namespace and the modules named in :data:`INTERFACE_MODULES`. ``torchopt_fn/ruff.toml`` bans
every other private module there (tests/test_layers.py keeps that list complete).

A transformation in five lines (Optax's shape, run on foreach kernels)::

    def scale_by_momentum(decay):
        def init(params):
            return bb.zeros(params)
        def update(updates, state, params=None):
            gs, spec = tm.float_leaves(updates)
            moments = bb.moving_average(bb.state_leaves(state, spec, updates, "state"), gs, decay)
            return tm.unflatten(spec, moments), tm.unflatten(spec, moments)
        return base.GradientTransformation(init, update)
"""

from optax_compat._runtime import tree_math
from optax_compat._runtime.capabilities import Capabilities, capabilities_of, declare
from optax_compat._runtime.dtypes import (
    as_strong,
    as_weak,
    canonical_dtype,
    default_float,
    default_int,
    is_weak,
    result_dtype,
)
from optax_compat._runtime.flat_safe import (
    FLAT,
    LAYOUTS,
    STACKED,
    elementwise,
    elementwise_if,
    global_reduction,
    per_leaf,
    why_not,
)
from optax_compat._runtime.inplace import (
    declares_inplace,
    supports_inplace,
    without_inplace_request,
)
from optax_compat._runtime.moments import (
    adam_ratio,
    bias_correction,
    debias,
    first_moment,
    moving_average,
)
from optax_compat._runtime.none_gradients import (
    Pruning,
    present_pairs,
    pruning,
    tolerates_none,
    tolerates_none_step,
)
from optax_compat._runtime.numbers import (
    as_tensor,
    check_hyperparameter,
    is_number,
    is_one,
    is_zero,
    value_at,
)
from optax_compat._runtime.state import (
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

#: The runtime modules ``torchopt_fn`` may import besides this package's namespace.
INTERFACE_MODULES = ("tree_math", "adam_engine")
