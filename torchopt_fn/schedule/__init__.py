"""Learning-rate schedules (``torchopt.schedule``)."""

from torchopt_fn.schedule.exponential_decay import exponential_decay
from torchopt_fn.schedule.polynomial import linear_schedule, polynomial_schedule

__all__ = ["exponential_decay", "polynomial_schedule", "linear_schedule"]
