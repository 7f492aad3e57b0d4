"""Property-based testing of gradient transformations, for this package and its users.

The property checks here need only PyTorch. The hypothesis strategies live in
:mod:`optax_compat.testing.strategies`, which imports hypothesis when it is imported itself, so
the library does not depend on hypothesis at run time.
"""
