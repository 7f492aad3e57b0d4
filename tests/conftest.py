"""Hypothesis profiles: deterministic in CI, exploratory on demand.

``ci`` (the default) draws the same examples on every run, keeps no example database and
has no deadline (timings on shared CI machines are noise). ``long`` explores: fresh random
examples on every run, remembered failures (the local example database) and many more
examples for tests that do not pin ``max_examples``. Select it with
``python -m pytest --hypothesis-profile=long tests``.
"""

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.register_profile("long", derandomize=False, deadline=None, max_examples=1000)
settings.load_profile("ci")
