"""The TorchOpt version this package reproduces."""

__version__ = "0.7.3"
__license__ = "Apache License, Version 2.0"
__author__ = "TorchOpt Contributors"
__release__ = True
