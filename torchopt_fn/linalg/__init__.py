"""Matrix-free linear algebra on pytrees: conjugate gradient and Neumann series."""

from torchopt_fn.linalg.cg import cg
from torchopt_fn.linalg.ns import ns, ns_inv

__all__ = ["cg", "ns", "ns_inv"]
