"""TorchOpt's API for differentiable optimization, built on :mod:`optax_compat`."""
