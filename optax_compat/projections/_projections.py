"""Euclidean projections of pytrees (mirrors ``optax/projections/_projections.py``).

Every function is differentiable through torch autograd, as Optax's are through JAX: clipping
splits the gradient at ties like ``jnp.clip``, the simplex projection has Optax's closed-form
Jacobian (``torch.func.jvp``, ``vmap`` and double backward work too), and the ball projections
select between the inside and outside cases with ``torch.where`` (no host synchronisation).
"""

from __future__ import annotations

from typing import Any, Union

import optree
import torch

from optax_compat import tree_utils
from optax_compat._runtime import tree_math as tm

Scalar = Union[float, int, torch.Tensor]


def _tensor_leaves(tree: Any, what: str) -> tuple[tm.Leaves, optree.PyTreeSpec]:
    """Flattens ``tree``, raising a TypeError naming the path of the first non-tensor leaf."""
    xs, spec = tm.flatten(tree)
    if all(isinstance(x, torch.Tensor) for x in xs):
        return xs, spec
    paths, path_leaves, _ = optree.tree_flatten_with_path(
        tree, none_is_leaf=tm.NONE_IS_LEAF, namespace=tm.NAMESPACE)
    path, leaf = next((p, x) for p, x in zip(paths, path_leaves)
                      if not isinstance(x, torch.Tensor))
    raise TypeError(f"The leaf of {what} at path {tm.path_str(path)} is a {type(leaf).__name__}; "
                    "projections act on trees of tensors.")


def _bound_leaves(bound: Any, xs: tm.Leaves, spec: optree.PyTreeSpec, tree: Any,
                  what: str) -> list[Any]:
    """One bound per leaf: a number or tensor applies to every leaf, a tree must match."""
    if isinstance(bound, (int, float, torch.Tensor)):
        return [bound] * len(xs)
    return tm.leaves_like(bound, spec, what, reference=tree)


def _as_operand(bound: Any, x: torch.Tensor) -> torch.Tensor:
    """A bound as a tensor; numbers take the leaf's dtype, as JAX's weakly typed scalars do."""
    if isinstance(bound, torch.Tensor):
        return bound
    return torch.as_tensor(bound, dtype=x.dtype, device=x.device)


def projection_non_negative(tree: Any) -> Any:
    r"""Projection onto the non-negative orthant.

    .. math::

      \underset{p}{\text{argmin}} ~ \|x - p\|_2^2 \quad \textrm{subject to} \quad p \ge 0

    Args:
      tree: tree to project.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    xs, spec = _tensor_leaves(tree, "tree")
    return tm.unflatten(spec, [torch.relu(x) for x in xs])


def projection_box(tree: Any, lower: Any, upper: Any) -> Any:
    r"""Projection onto box constraints.

    .. math::

      \underset{p}{\text{argmin}} ~ \|x - p\|_2^2 \quad \textrm{subject to} \quad
      \text{lower} \le p \le \text{upper}

    Args:
      tree: tree to project.
      lower: lower bound, a scalar (applied to every leaf) or a tree with the structure of
        ``tree``.
      upper: upper bound, a scalar or a tree with the structure of ``tree``.

    Returns:
      projected tree, with the same structure as ``tree``.

    Raises:
      ValueError: if a bound tree does not have the structure of ``tree`` (naming the path).
    """
    xs, spec = _tensor_leaves(tree, "tree")
    lowers = _bound_leaves(lower, xs, spec, tree, "lower")
    uppers = _bound_leaves(upper, xs, spec, tree, "upper")
    # maximum then minimum (not clamp) so that the gradient is shared at ties, as in jnp.clip.
    return tm.unflatten(spec, [
        torch.minimum(torch.maximum(x, _as_operand(low, x)), _as_operand(high, x))
        for x, low, high in zip(xs, lowers, uppers)])


def projection_hypercube(tree: Any, scale: Any = 1) -> Any:
    r"""Projection onto the hypercube ``0 <= p <= scale`` (the unit hypercube by default).

    A convenience wrapper around :func:`projection_box`.

    Args:
      tree: tree to project.
      scale: scale of the hypercube, a scalar or a tree (default: 1).

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    return projection_box(tree, lower=0, upper=scale)


class _UnitSimplexProjection(torch.autograd.Function):
    """Sort-based projection of each last-axis vector onto the unit simplex, with Optax's Jacobian.

    Reference: Duchi et al., `Efficient Projections onto the l1-Ball for Learning in High
    Dimensions <https://doi.org/10.1145/1390156.1390191>`_, 2008.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(values: torch.Tensor) -> torch.Tensor:
        descending = torch.sort(values, dim=-1, descending=True).values
        cumsum = torch.cumsum(descending, dim=-1)
        ranks = torch.arange(1, values.shape[-1] + 1, dtype=values.dtype, device=values.device)
        in_support = 1 / ranks + (descending - cumsum / ranks) > 0
        support_size = in_support.sum(-1, keepdim=True)
        # Gathered rather than indexed with the count: indexing would read it on the host.
        threshold_sum = torch.gather(cumsum, -1, support_size - 1)
        size = support_size.to(values.dtype)
        return torch.relu(1 / size + (values - threshold_sum / size))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def _apply_jacobian(projection: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
        """``J @ direction`` for the symmetric Jacobian ``diag(s) - s s^T / |s|``, ``s = p > 0``."""
        support = (projection > 0).to(direction.dtype)
        cardinality = support.sum(-1, keepdim=True)
        return support * direction - ((support * direction).sum(-1, keepdim=True)
                                      / cardinality) * support

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        (projection,) = ctx.saved_tensors
        return _UnitSimplexProjection._apply_jacobian(projection, grad_output)

    @staticmethod
    def jvp(ctx: Any, values_tangent: torch.Tensor) -> torch.Tensor:
        (projection,) = ctx.saved_tensors
        return _UnitSimplexProjection._apply_jacobian(projection, values_tangent)


def unit_simplex_rows(values: torch.Tensor) -> torch.Tensor:
    """Projects each vector along the last axis of ``values`` onto the probability simplex.

    Differentiable (reverse and forward mode, ``vmap``) with Optax's Jacobian: on the support
    ``S`` of the projection it is ``I - 1 1^T / |S|``, zero elsewhere.
    """
    return _UnitSimplexProjection.apply(values)


def projection_simplex(tree: Any, scale: Scalar = 1) -> Any:
    r"""Projection onto a simplex.

    Solves, with all leaves of the input tree ``x`` seen as one vector,

    .. math::

      \underset{p}{\text{argmin}} ~ \|x - p\|_2^2 \quad \textrm{subject to} \quad
      p \ge 0, p^\top 1 = \text{scale}

    By default the projection is onto the probability simplex. The result is differentiable
    with respect to the tree and to a tensor ``scale``.

    Args:
      tree: tree to project.
      scale: value the projected tree should sum to (default: 1).

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    xs, spec = _tensor_leaves(tree, "tree")
    if not xs:
        return tree
    values = tm.ravel(xs)
    projected = scale * unit_simplex_rows(values / scale)
    return tm.unflatten(spec, tm.unravel(projected, xs))


def projection_l1_sphere(tree: Any, scale: Scalar = 1) -> Any:
    r"""Projection onto the l1 sphere ``||y||_1 = scale``.

    Args:
      tree: tree to project.
      scale: radius of the sphere.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    xs, spec = _tensor_leaves(tree, "tree")
    magnitudes = projection_simplex(tm.unflatten(spec, tm.abs(xs)), scale)
    return tm.unflatten(spec, tm.mul(tm.sign(xs), tm.leaves(magnitudes)))


def projection_l1_ball(tree: Any, scale: Scalar = 1) -> Any:
    r"""Projection onto the l1 ball ``||y||_1 <= scale``.

    Args:
      tree: tree to project.
      scale: radius of the ball.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    _tensor_leaves(tree, "tree")
    inside = tree_utils.tree_norm(tree, ord=1) <= scale
    return tree_utils.tree_where(inside, tree, projection_l1_sphere(tree, scale))


def projection_l2_sphere(tree: Any, scale: Scalar = 1) -> Any:
    r"""Projection onto the l2 sphere ``||y||_2 = scale``.

    Args:
      tree: tree to project.
      scale: radius of the sphere.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    _tensor_leaves(tree, "tree")
    return tree_utils.tree_scale(scale / tree_utils.tree_norm(tree), tree)


def projection_l2_ball(tree: Any, scale: Scalar = 1) -> Any:
    r"""Projection onto the l2 ball ``||y||_2 <= scale``.

    Args:
      tree: tree to project.
      scale: radius of the ball.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    _tensor_leaves(tree, "tree")
    squared_norm = tree_utils.tree_norm(tree, squared=True)
    factor = scale / torch.sqrt(torch.maximum(squared_norm, _as_operand(scale**2, squared_norm)))
    return tree_utils.tree_scale(factor, tree)


def projection_linf_ball(tree: Any, scale: Scalar = 1) -> Any:
    r"""Projection onto the l-infinity ball ``||y||_inf <= scale``.

    Args:
      tree: tree to project.
      scale: radius of the ball.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    return projection_box(tree, lower=-scale, upper=scale)


def projection_vector(x: Any, a: Any) -> Any:
    r"""Projection of the tree ``x`` onto the line spanned by the tree ``a``.

    .. math::

      \operatorname{proj}_a x = \frac{\langle x, a \rangle}{\langle a, a \rangle} a

    Args:
      x: tree to project.
      a: tree onto which to project, with the structure of ``x``.

    Returns:
      tree with the same structure as ``x``.
    """
    _tensor_leaves(x, "x")
    scalar = tree_utils.tree_vdot(x, a) / tree_utils.tree_vdot(a, a)
    return tree_utils.tree_scale(scalar, a)


def _hyperplane_step(x: Any, a: Any, b: Scalar) -> torch.Tensor:
    """The multiple of ``a`` that moves ``x`` onto the hyperplane ``<a, y> = b``."""
    _tensor_leaves(x, "x")
    return (b - tree_utils.tree_vdot(x, a)) / tree_utils.tree_vdot(a, a)


def projection_hyperplane(x: Any, a: Any, b: Scalar) -> Any:
    r"""Projection onto the hyperplane ``<a, y> = b``.

    Args:
      x: tree to project.
      a: tree defining the hyperplane, with the structure of ``x``.
      b: scalar defining the hyperplane.

    Returns:
      tree with the same structure as ``x``.
    """
    return tree_utils.tree_add_scale(x, _hyperplane_step(x, a, b), a)


def projection_halfspace(x: Any, a: Any, b: Scalar) -> Any:
    r"""Projection onto the halfspace ``<a, y> <= b``.

    Args:
      x: tree to project.
      a: tree defining the halfspace, with the structure of ``x``.
      b: scalar defining the halfspace.

    Returns:
      tree with the same structure as ``x``.
    """
    step = _hyperplane_step(x, a, b)
    step = torch.minimum(step, torch.zeros_like(step))
    return tree_utils.tree_add_scale(x, step, a)
