"""Contributed optimizers and transforms: Optax's ``optax.contrib``, one to one.

Each module mirrors the Optax file of the same name; these are the algorithms Optax keeps outside
its core because they are newer or more specialised.
"""
from optax_compat.contrib._acprop import (
    acprop,
    scale_by_acprop,
)
from optax_compat.contrib._ademamix import (
    ScaleByAdemamixState,
    ScaleBySimplifiedAdEMAMixState,
    ademamix,
    scale_by_ademamix,
    scale_by_simplified_ademamix,
    simplified_ademamix,
)
from optax_compat.contrib._adopt import (
    adopt,
    scale_by_adopt,
)
from optax_compat.contrib._cocob import (
    COCOBState,
    cocob,
    scale_by_cocob,
)
from optax_compat.contrib._complex_valued import (
    SplitRealAndImaginaryState,
    split_real_and_imaginary,
)
from optax_compat.contrib._dadapt_adamw import (
    DAdaptAdamWState,
    dadapt_adamw,
)
from optax_compat.contrib._dog import (
    DoGState,
    DoWGState,
    dog,
    dowg,
)
from optax_compat.contrib._galore import (
    GaLoreDimensionNumbers,
    GaLoreState,
    galore,
    scale_by_galore,
)
from optax_compat.contrib._madgrad import (
    MadgradState,
    madgrad,
    scale_by_madgrad,
)
from optax_compat.contrib._mechanic import (
    MechanicState,
    mechanize,
)
from optax_compat.contrib._momo import (
    MomoAdamState,
    MomoState,
    momo,
    momo_adam,
)
from optax_compat.contrib._muon import (
    MuonDimensionNumbers,
    MuonState,
    muon,
    scale_by_muon,
)
from optax_compat.contrib._privacy import (
    DifferentiallyPrivateAggregateState,
    differentially_private_aggregate,
    dpsgd,
)
from optax_compat.contrib._prodigy import (
    ProdigyState,
    prodigy,
)
from optax_compat.contrib._reduce_on_plateau import (
    ReduceLROnPlateauState,
    reduce_on_plateau,
)
from optax_compat.contrib._sam import (
    NormalizeState,
    SAMState,
    normalize,
    sam,
)
from optax_compat.contrib._schedule_free import (
    ScheduleFreeState,
    schedule_free,
    schedule_free_adamw,
    schedule_free_eval_params,
    schedule_free_sgd,
)
from optax_compat.contrib._sophia import (
    HutchinsonState,
    SophiaState,
    hutchinson_estimator_diag_hessian,
    sophia,
)
