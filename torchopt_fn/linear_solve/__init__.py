"""Matrix-free linear solvers ``solve(matvec, b) -> x`` for implicit differentiation."""

from torchopt_fn.linear_solve.cg import solve_cg
from torchopt_fn.linear_solve.inv import solve_inv
from torchopt_fn.linear_solve.normal_cg import solve_normal_cg

__all__ = ["solve_cg", "solve_normal_cg", "solve_inv"]
