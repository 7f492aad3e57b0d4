"""TorchOpt's preset transformations, built from ``optax_compat``'s (``torchopt.transform``)."""

from torchopt_fn.transform.add_decayed_weights import add_decayed_weights, masked
from torchopt_fn.transform.nan_to_num import nan_to_num
from torchopt_fn.transform.scale import scale
from torchopt_fn.transform.scale_by_adadelta import scale_by_adadelta
from torchopt_fn.transform.scale_by_adam import scale_by_accelerated_adam, scale_by_adam
from torchopt_fn.transform.scale_by_adamax import scale_by_adamax
from torchopt_fn.transform.scale_by_radam import scale_by_radam
from torchopt_fn.transform.scale_by_rms import scale_by_rms
from torchopt_fn.transform.scale_by_rss import scale_by_rss
from torchopt_fn.transform.scale_by_schedule import scale_by_schedule
from torchopt_fn.transform.scale_by_stddev import scale_by_stddev
from torchopt_fn.transform.trace import trace

__all__ = [
    "trace",
    "scale",
    "scale_by_schedule",
    "add_decayed_weights",
    "masked",
    "scale_by_adam",
    "scale_by_adamax",
    "scale_by_adadelta",
    "scale_by_radam",
    "scale_by_accelerated_adam",
    "scale_by_rss",
    "scale_by_rms",
    "scale_by_stddev",
    "nan_to_num",
]
