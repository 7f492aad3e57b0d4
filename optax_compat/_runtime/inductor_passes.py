"""An Inductor pass and code-generation settings for the fused steps of
:mod:`optax_compat._runtime.fused`.

Imported only when a fused step compiles with Inductor (importing Inductor takes seconds).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import sympy
import torch
from torch._inductor import config, custom_graph_pass, ir, lowering, scheduler, utils
from torch._inductor.codegen import cpp
from torch._inductor.dependencies import MemoryDep


@torch.library.custom_op("optax_compat::computed_scalar", mutates_args=())
def computed_scalar(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x``; Inductor computes ``x`` into a buffer of its own before the loops that
    read the copy (see :class:`HoistScalars`)."""
    return x.clone()


@computed_scalar.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@lowering.register_lowering(torch.ops.optax_compat.computed_scalar.default,
                            type_promotion_kind=None)
def _computed_scalar_loop(x: Any) -> Any:
    """Inductor's code for :func:`computed_scalar`: a loop that stores ``x``, which Inductor
    can still place inside a larger loop nest (an opaque call would end every fusion)."""
    value = lowering.clone(x)
    value.realize()
    return value


class HoistScalars(custom_graph_pass.CustomGraphPass):
    """A post-grad pass: scalars computed from scalars are computed once per step.

    Inductor inlines a small computation (Adam's bias corrections ``1 - b ** t``, a learning
    rate schedule; under ``vmap``, a per-leaf trust ratio or Adafactor's per-row factor) into
    every kernel that reads it, and its C++ kernels evaluate it at every vector of the loop:
    ``-fmath-errno`` keeps GCC from hoisting ``pow`` or ``sqrt`` out of the loop, which then
    costs more than the memory traffic. Routing each such value through
    :func:`computed_scalar` makes Inductor compute it into a small buffer first.

    A "scalar" here is a value computed from values no larger than itself, read by an op with
    more elements (a 0-d tensor read by a vector, a per-row factor read by a matrix). Computing
    it once also rounds it once, to its dtype, as the eager step does (inlined, a float32
    scalar computed from float64 ones may keep float64's precision).

    Divisions by broadcast values first become products with their reciprocals, as XLA makes
    them (:func:`_multiply_by_reciprocals`).
    """

    def __call__(self, graph: torch.fx.Graph) -> None:
        """Turns divisions by broadcast values into products with their reciprocals, then
        inserts :func:`computed_scalar` between computed scalars and their broadcast
        readers."""
        _multiply_by_reciprocals(graph)
        for node in list(graph.nodes):
            size = _numel(node)
            if node.op != "call_function" or size is None or not all(
                    (_numel(x) or 0) <= size for x in node.all_input_nodes):
                continue
            if size > 1 and _is_view(node):
                continue  # its input is hoisted instead, if that is computed
            readers = [user for user in node.users if _reads_broadcast(user, size)]
            if not readers:
                continue
            with graph.inserting_after(node):
                hoisted = graph.call_function(torch.ops.optax_compat.computed_scalar.default,
                                              (node,))
            hoisted.meta["val"] = node.meta["val"]
            for reader in readers:
                reader.replace_input_with(node, hoisted)

    def uuid(self) -> str:
        """The pass's identity in Inductor's cache keys."""
        return "optax_compat.HoistScalars.14"


def _multiply_by_reciprocals(graph: torch.fx.Graph) -> None:
    """Rewrites ``x / s``, where ``s`` is broadcast to ``x``'s shape (a 0-d bias correction, a
    per-leaf norm, a per-row factor), as ``x * (1 / s)``.

    XLA's algebraic simplifier makes the same rewrite, so these are Optax's numbers under
    ``jax.jit`` bit for bit (an exact division differs from them in the last bit for about a
    quarter of the elements). The reciprocal is then a computed scalar, computed once per
    step: the loop over ``x`` multiplies instead of dividing, and a vector division costs
    several times a multiplication (LAMB's stacked step divided each element by two bias
    corrections, in each of its two passes over a leaf).
    """
    for node in list(graph.nodes):
        if node.target is not torch.ops.aten.div.Tensor or len(node.args) != 2:
            continue
        dividend, divisor = node.args
        value = node.meta.get("val")
        if not (isinstance(dividend, torch.fx.Node) and isinstance(divisor, torch.fx.Node)
                and isinstance(value, torch.Tensor) and value.is_floating_point()):
            continue
        size, quotient_size = _numel(divisor), _numel(node)
        if size is None or quotient_size is None or size >= quotient_size or not all(
                x.meta["val"].dtype == value.dtype for x in (dividend, divisor)):
            continue
        with graph.inserting_before(node):
            reciprocal = graph.call_function(torch.ops.aten.reciprocal.default, (divisor,))
            reciprocal.meta["val"] = divisor.meta["val"]
            product = graph.call_function(torch.ops.aten.mul.Tensor, (dividend, reciprocal))
            product.meta["val"] = value
        node.replace_all_uses_with(product)
        graph.erase_node(node)


_VIEWS = frozenset({"reshape", "view", "unsqueeze", "squeeze", "permute", "expand", "slice",
                    "select", "alias", "unbind", "as_strided", "t", "transpose", "getitem"})


def _reads_broadcast(user: torch.fx.Node, size: int) -> bool:
    """Whether ``user`` reads a value of ``size`` elements into more elements, itself or (a
    view of the value, such as one part of an ``unbind``) through its own readers."""
    numel = _largest_numel(user)
    if numel is not None and numel > size:
        return True
    return _is_view(user) and any(_reads_broadcast(reader, size) for reader in user.users)


def _is_view(node: torch.fx.Node) -> bool:
    """Whether ``node`` only reshapes or indexes another value (it computes nothing)."""
    name = getattr(node.target, "__name__", str(node.target))
    return name.split(".")[0] in _VIEWS


def _numel(node: torch.fx.Node) -> int | None:
    """The number of elements ``node`` computes, if it is one tensor of static shape."""
    value = node.meta.get("val")
    return _static_numel(value) if isinstance(value, torch.Tensor) else None


def _largest_numel(node: torch.fx.Node) -> int | None:
    """The elements of ``node``'s largest output: one tensor, or a list of them (a
    ``torch._foreach_*`` op over the flat buffers), if all are of static shape."""
    value = node.meta.get("val")
    outputs = value if isinstance(value, (list, tuple)) else [value]
    sizes = [_static_numel(x) if isinstance(x, torch.Tensor) else None for x in outputs]
    return max(sizes) if sizes and None not in sizes else None


def _static_numel(value: torch.Tensor) -> int | None:
    try:
        return int(value.numel())
    except (TypeError, RuntimeError):  # a symbolic size
        return None


def compile_with_passes(compile_fx: Callable[..., Any], graph: torch.fx.GraphModule,
                        example_inputs: Any, *, leaf_loops: bool) -> Any:
    """``compile_fx(graph, example_inputs)`` with :class:`HoistScalars` and, if
    ``leaf_loops``, :func:`per_leaf_loops` (for a stacked step on the CPU).

    Should that raise (this PyTorch's Inductor differs in a way the checks of
    :func:`per_leaf_loops` cannot see), the step compiles with stock Inductor instead (same
    numbers, maybe slower) and a ``UserWarning`` says so, once per process; an error that
    stock Inductor raises too is raised.
    """
    try:
        with config.patch(post_grad_custom_post_pass=HoistScalars()), (
                per_leaf_loops() if leaf_loops else contextlib.nullcontext()):
            return compile_fx(graph, example_inputs)
    except Exception as error:  # whatever our passes raise: stock Inductor decides
        compiled = compile_fx(graph, example_inputs)
        reason = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
        _warn_once("stock Inductor", f"optax_compat.fused_step: compiling with optax_compat's "
                  f"Inductor passes failed ({reason}), so fused steps compile with stock "
                  "Inductor (same numbers, maybe slower).")
        return compiled


# A node of at most this many elements, one axis and no reduction is a per-leaf value of a
# stacked step (one element per leaf): see :func:`per_leaf_loops`.
PER_LEAF_VALUES_AT_MOST = 16384


@contextlib.contextmanager
def per_leaf_loops() -> Iterator[None]:
    """While a stacked step compiles: one loop over the leaves, each leaf read once from memory.

    A step with per-leaf reductions (LAMB's and LARS's trust ratios, Fromage's norms, Adafactor's
    factors) reads each leaf to reduce it, computes a few values per leaf from the results, then
    reads the leaf again to update it. Inductor's C++ backend can nest all three in one loop
    over the leaves ("outer loop fusion"), so that the second read finds the leaf in the cache,
    but its heuristics prevent it here, and this context sets them aside:

    * it keeps separate loops when a leaf has over 300 times more elements than there are
      leaves, to parallelize within leaves instead; outer loop fusion is kept here when there
      are at least as many leaves as threads;
    * it vectorizes the per-leaf values' own loop over the leaves (16 leaves at a time), whose
      step then differs from the leaves' loop, which makes the fusion fall back; their loop is
      left scalar here (one iteration per leaf, a few operations each);
    * it nests loops in one outer loop only when one consumes the other's values; here two
      loops that read the same leaf but do not depend on each other nest too (SM3's per-row
      maxima and its update both read the gradient, neither reads the other);
    * it sees no data shared between two loops that read a buffer in different orders (SM3's
      row and column maxima), and so does not consider fusing them; here a buffer both read
      counts as shared, since one loop over the leaves finds each leaf in the cache in any
      order;
    * it would then run such loops as one, over tiles that it transposes, and a tiled pass
      reads memory at half the speed of a pass along the rows; here they only nest, one after
      the other, so the first reads the leaf from memory and the second from the cache;
    * it pairs only loops that touch a common buffer: Fromage's norms of a leaf's parameter
      and of its gradient run as two passes; here reductions over the same loops count as
      sharing and Inductor's aggressive fusion pairs them, so that one pass reads both (two
      streams read at once stream faster than one after the other);
    * it nests as many outer loops as the loops have in common (a leaf's rows, when two
      loops run over the same rows), and falls back to separate loops when one of them walks
      the leaf in another order (columns); here only the loop over the leaves is shared;
    * it nests a consumer with its producer only when the consumer reads each value at the
      index the producer wrote it (Adafactor's update reads its column factors broadcast over
      the rows); here it also does when, for each leaf, the consumer reads only values the
      producer writes for that leaf, which the nest computes first;
    * it merges a reduction's loop over the leaves with its loop over a leaf's rows when the
      two are contiguous (Adafactor's row sums run over 80,000 rows, not over 200 leaves of
      400 rows), and the merged loop cannot share the loop over the leaves; here a
      reduction keeps its first axis a loop of its own.

    All are internal to Inductor. Each replacement is installed only where this PyTorch's
    Inductor has the shape it was written for (:data:`_REPLACEMENTS`); where it does not, the
    step compiles without that optimization (same numbers, maybe slower) and a ``UserWarning``
    says so, once per process per optimization.
    """
    with contextlib.ExitStack() as stack:
        configs: dict[str, Any] = {}
        for replacement in _REPLACEMENTS:
            mismatch = _mismatch(replacement)
            if mismatch is not None:
                _warn_once(replacement.optimization,
                          f"optax_compat.fused_step: {mismatch} in this PyTorch's Inductor, so "
                          f"stacked steps compile without {replacement.optimization} (same "
                          "numbers, maybe slower).")
                continue
            owner_path, name = replacement.target.rsplit(".", 1)
            owner = _resolve(owner_path)
            stack.callback(_put_back, owner, name, vars(owner).get(name, _ABSENT))
            setattr(owner, name, replacement.wrap(getattr(owner, name)))
            configs.update(replacement.configs)
        stack.enter_context(config.patch(configs))
        yield


class _Replacement(NamedTuple):
    """A private Inductor method that :func:`per_leaf_loops` replaces, and what the
    replacement expects of Inductor."""

    target: str  # "module.Class.method", the module a key of _MODULES
    signatures: tuple[tuple[str, ...], ...]  # its parameter names, in the versions known
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]]  # original -> replacement
    optimization: str  # what the step loses without it, for the warning
    reads: tuple[str, ...] = ()  # the other internals the replacement calls or reads
    configs: tuple[tuple[str, Any], ...] = ()  # Inductor configs set while it is installed


_MODULES = {"cpp": cpp, "config": config, "ir": ir, "scheduler": scheduler, "utils": utils}
_ABSENT = object()
_warned: set[str] = set()


def _warn_once(topic: str, message: str) -> None:
    """Issues ``message`` as a ``UserWarning`` the first time this process warns on
    ``topic``."""
    if topic not in _warned:
        _warned.add(topic)
        warnings.warn(message, UserWarning, stacklevel=3)


def _resolve(path: str) -> Any:
    """The object at ``path`` ("module.Class.attribute"); ``AttributeError`` if absent."""
    module, *names = path.split(".")
    return functools.reduce(getattr, names, _MODULES[module])


def _mismatch(replacement: _Replacement) -> str | None:
    """What in this Inductor differs from what ``replacement`` expects, or ``None``."""
    for path in (replacement.target, *replacement.reads,
                 *(f"config.{name}" for name, _ in replacement.configs)):
        try:
            _resolve(path)
        except AttributeError:
            return f"{path} is missing"
    parameters = tuple(inspect.signature(_resolve(replacement.target)).parameters)
    if parameters not in replacement.signatures:
        return (f"{replacement.target} takes ({', '.join(parameters)}), not "
                + " or ".join(f"({', '.join(known)})" for known in replacement.signatures))
    return None


def _put_back(owner: type, name: str, original: Any) -> None:
    """Restores ``owner.name`` to ``original``, its own attribute before, or to inheriting
    it (``_ABSENT``)."""
    if original is _ABSENT:
        delattr(owner, name)
    else:
        setattr(owner, name, original)


def _fused_when_leaves_fill_the_threads(check: Callable[..., bool]) -> Callable[..., bool]:
    """``check`` without its parallelism test when the outer loops have an iteration for every
    thread: the test sees inner loops of one iteration."""

    def fused_when_leaves_fill_the_threads(self: Any, proxies: list[Any], depth: int) -> bool:
        outer = [sympy.Mul(*proxy.ranges[:depth]) for proxy in proxies]
        if not all(isinstance(size, sympy.Integer) and size >= utils.parallel_num_threads()
                   for size in outer):
            return check(self, proxies, depth)
        ranges = [proxy.ranges for proxy in proxies]
        try:
            for proxy in proxies:
                proxy.ranges = [*proxy.ranges[:depth], *[sympy.Integer(1)] * (
                    len(proxy.ranges) - depth)]
            return check(self, proxies, depth)
        finally:
            for proxy, saved in zip(proxies, ranges, strict=True):
                proxy.ranges = saved

    return fused_when_leaves_fill_the_threads


def _per_leaf_values_unvectorized(select: Callable[..., Any]) -> Callable[..., Any]:
    """``select`` choosing no vector tiling for nodes of per-leaf values (one small axis)."""

    def per_leaf_values_unvectorized(self: Any, fn_list: Any, var_sizes_list: Any) -> Any:
        if all(len(sizes) == 1 and not reduction and isinstance(sizes[0], (int, sympy.Integer))
               and int(sizes[0]) <= PER_LEAF_VALUES_AT_MOST
               for sizes, reduction in var_sizes_list):
            return [], [], cpp.KernelOpStats()
        return select(self, fn_list, var_sizes_list)

    return per_leaf_values_unvectorized


def _not_when_reading_in_other_orders(can_share: Callable[..., bool]) -> Callable[..., bool]:
    """``can_share`` (whether two nodes can run in one loop) false for two nodes that touch a
    common buffer but no element of it at the same index (a leaf read by rows and by
    columns): they can still nest in one loop over the leaves."""

    def not_when_reading_in_other_orders(self: Any, node1: Any, node2: Any) -> bool:
        accesses1 = node1.read_writes.reads | node1.read_writes.writes
        accesses2 = node2.read_writes.reads | node2.read_writes.writes
        other_orders = not accesses1 & accesses2 and _touch_a_common_buffer(node1, node2)
        return not other_orders and can_share(self, node1, node2)

    return not_when_reading_in_other_orders


def _independent_loops_nest(can_fuse: Callable[..., bool]) -> Callable[..., bool]:
    """``can_fuse`` (a horizontal fusion, or a vertical one into one outer loop) also true for
    two nodes that neither depend on the other, cannot share a loop outright, but have outer
    loops in common: the scheduler then nests them in one outer loop, as it nests a consumer
    with its producer. The scheduler calls this only for nodes that read the same data."""

    def independent_loops_nest(self: Any, node1: Any, node2: Any) -> bool:
        return can_fuse(self, node1, node2) or (
            not node1.is_template() and not node2.is_template()
            and not node1.get_operation_names() & node2.ancestors
            and not node2.get_operation_names() & node1.ancestors
            and _can_only_nest(self, node1, node2))

    return independent_loops_nest


def _can_only_nest(scheduling: Any, node1: Any, node2: Any) -> bool:
    """Whether the C++ backend cannot run the two nodes in one loop but can nest them in one
    loop over the leaves."""
    return (not scheduling._can_fuse_horizontal_impl(node1, node2)
            and scheduling._get_outer_loop_fusion_depth(node1, node2) >= 1)


def _shared_data_or_loops(score: Callable[..., int]) -> Callable[..., int]:
    """``score`` (the data two nodes share, which gates their fusion) at least the threshold
    when both run on the CPU and either touch a common buffer, whatever their indexing, or
    are reductions over the same loops."""

    def shared_data_or_loops(self: Any, node1: Any, node2: Any, *args: Any,
                             **kwargs: Any) -> int:
        shared = score(self, node1, node2, *args, **kwargs)
        if shared >= config.score_fusion_memory_threshold or not (
                node1.is_cpu() and node2.is_cpu()):
            return shared
        same_reduction_loops = (node1.is_reduction() and node2.is_reduction()
                                and node1.group == node2.group)
        if same_reduction_loops or _touch_a_common_buffer(node1, node2):
            return config.score_fusion_memory_threshold
        return shared

    return shared_data_or_loops


def _touch_a_common_buffer(node1: Any, node2: Any) -> bool:
    """Whether the two nodes read or write a common buffer, at any indices."""
    return bool(node1.read_writes.buffer_names() & node2.read_writes.buffer_names())


def _the_loop_over_the_leaves(depth: Callable[..., int]) -> Callable[..., int]:
    """``depth`` (how many outer loops two nodes would share) at most one, and one where a nest
    over the leaves meets a node that shares the leaves' loop and more with the nest's loop
    next to it (Inductor then asks the nest's depth to equal what those two share)."""

    def the_loop_over_the_leaves(self: Any, node1: Any, node2: Any) -> int:
        shared = depth(self, node1, node2)
        nest = [node for node in (node1, node2)
                if isinstance(node, cpp.OuterLoopFusedSchedulerNode)]
        if shared == 0 and len(nest) == 1 and nest[0].outer_loop_fusion_depth == 1:
            # The nest's loops share only the leaves' loop with each other, maybe more with
            # the other node: ask about the two loops that would be adjacent.
            shared = depth(self, node1.get_outer_nodes()[-1] if node1 is nest[0] else node1,
                           node2.get_outer_nodes()[0] if node2 is nest[0] else node2)
        return min(shared, 1)

    return the_loop_over_the_leaves


def _leaf_by_leaf_reads_nest(can_fuse_vertical: Callable[..., bool]) -> Callable[..., bool]:
    """``can_fuse_vertical`` (whether a consumer may join its producer) also true, on the CPU,
    when the two can only nest in one loop over the leaves (they cannot share a loop outright)
    and every read that does not match a write reads, for each leaf, only what the producer
    writes for that leaf (:func:`_within_one_leaf`)."""

    def leaf_by_leaf_reads_nest(self: Any, node1: Any, node2: Any, **kwargs: Any) -> bool:
        if can_fuse_vertical(self, node1, node2, **kwargs):
            return True
        if not (node1.is_cpu() and node2.is_cpu()):
            return False
        if not _can_only_nest(self.get_backend(node1.get_device()), node1, node2):
            return False
        outer = node2.get_outer_nodes()[0] if isinstance(
            node2, cpp.OuterLoopFusedSchedulerNode) else node2
        leaves = outer.group[1][0][0]
        matches = self.fusable_read_and_write
        self.fusable_read_and_write = lambda read, write, **options: matches(
            read, write, **options) or _within_one_leaf(read, write, leaves)
        try:
            return can_fuse_vertical(self, node1, node2, **kwargs)
        finally:
            del self.fusable_read_and_write

    return leaf_by_leaf_reads_nest


def _reductions_keep_the_leaf_loop(compute_attrs: Callable[..., None]) -> Callable[..., None]:
    """``compute_attrs`` (which sets a node's loops from its buffer's) keeping, for a reduction
    of two or more output axes, the first one out of the merged loops, unless the caller
    constrains the loops itself."""

    def reductions_keep_the_leaf_loop(self: Any, extra_indexing_constraints: Any = None,
                                      recompute_sizes_body_func: Any = None) -> None:
        if (extra_indexing_constraints is None and recompute_sizes_body_func is None
                and isinstance(self.node, ir.ComputedBuffer)
                and self.node.get_reduction_type()):
            _, body, (axes, _) = self.node.get_default_sizes_body()
            if len(axes) > 1:
                # An index that reads the first axis alone keeps it unmerged.
                # A pair before PyTorch 2.14, a dataclass of the two since.
                constraints = getattr(ir, "ExtraIndexingConstraints", lambda *pair: pair)
                extra_indexing_constraints = constraints(body.var_ranges, [axes[0]])
        compute_attrs(self, extra_indexing_constraints, recompute_sizes_body_func)

    return reductions_keep_the_leaf_loop


def _within_one_leaf(read: Any, write: Any, leaves: Any) -> bool:
    """Whether, in a loop over ``leaves`` leaves, ``read`` reads for leaf ``i`` only elements
    that ``write`` writes for leaf ``i``: both index ``stride * i + rest`` with ``0 <= rest <
    stride`` (the same ``stride``), or the write is dense, in loop order, its loops merged into
    one (leaf ``i`` then writes ``[i * stride, (i + 1) * stride)``)."""
    if not (isinstance(read, MemoryDep) and isinstance(write, MemoryDep)) or (
            read.name != write.name):
        return False
    read_span, write_span = _leaf_span(read), _leaf_span(write)
    if read_span is None or write_span is None or read_span[0] != leaves:
        return False
    merged = (len(write.var_names) == 1 and write.index == write.var_names[0]
              and write_span == (leaves * read_span[1], 1))
    return write_span == read_span or merged


def _leaf_span(dep: Any) -> tuple[Any, Any] | None:
    """``(leaves, stride)`` if ``dep``'s index is ``stride * leaf + rest``, with ``leaf`` its
    first variable (``leaves`` values), ``rest`` affine in the others with non-negative integer
    coefficients and ``0 <= rest < stride``; else ``None``."""
    if not dep.var_names or len(dep.size) != len(dep.var_names):
        return None
    leaf, *others = dep.var_names
    leaves, *sizes = map(sympy.sympify, dep.size)
    index = sympy.expand(dep.index)
    stride = index.coeff(leaf)
    rest = sympy.expand(index - stride * leaf)
    if not (isinstance(stride, sympy.Integer) and stride > 0) or leaf in rest.free_symbols:
        return None
    highest, linear = sympy.Integer(0), sympy.Integer(0)
    for var, size in zip(others, sizes, strict=True):
        coefficient = rest.coeff(var)
        if not (isinstance(coefficient, sympy.Integer) and coefficient >= 0
                and isinstance(size, sympy.Integer)):
            return None
        highest += coefficient * (size - 1)
        linear += coefficient * var
    offset = sympy.expand(rest - linear)
    if not isinstance(offset, sympy.Integer) or offset < 0 or offset + highest >= stride:
        return None
    return leaves, stride


_NODES = ("self", "node1", "node2")
_CAN_SHARE_A_LOOP = ("cpp.CppScheduling._can_fuse_horizontal_impl",
                     "cpp.CppScheduling._get_outer_loop_fusion_depth",
                     "scheduler.BaseSchedulerNode.is_template",
                     "scheduler.BaseSchedulerNode.get_operation_names")

# What :func:`per_leaf_loops` replaces, in the order of its docstring's list. Signatures are
# parameter names as ``inspect.signature`` gives them, in PyTorch 2.13 to 2.15.
_REPLACEMENTS = (
    _Replacement("cpp.OuterLoopFusedSchedulerNode.check_outer_fusion_loop_level_attr",
                 (("self", "cpp_kernel_proxy_list", "outer_loop_fusion_depth"),),
                 _fused_when_leaves_fill_the_threads,
                 "outer loop fusion of leaves much longer than their number",
                 reads=("utils.parallel_num_threads",)),
    _Replacement("cpp.TilingSelect.select_tiling",
                 (("self", "fn_list", "var_sizes_list"),), _per_leaf_values_unvectorized,
                 "scalar loops for per-leaf values", reads=("cpp.KernelOpStats",)),
    _Replacement("cpp.CppScheduling.can_fuse_horizontal", (_NODES,), _independent_loops_nest,
                 "nesting of independent loops over the leaves", reads=_CAN_SHARE_A_LOOP),
    _Replacement("cpp.CppScheduling.can_fuse_vertical_outer_loop", (_NODES,),
                 _independent_loops_nest, "nesting of independent loops over the leaves",
                 reads=_CAN_SHARE_A_LOOP),
    _Replacement("scheduler.Scheduler._score_fusion_memory_for_can_fuse",
                 ((*_NODES, "allow_mix_order_reduction", "index_equivalent_dep_names"),
                  (*_NODES, "allow_mix_order_reduction")),
                 _shared_data_or_loops,
                 "fusion of loops that share data in other orders or share reduction loops",
                 reads=("config.score_fusion_memory_threshold",
                        "scheduler.BaseSchedulerNode.is_cpu",
                        "scheduler.BaseSchedulerNode.is_reduction"),
                 configs=(("aggressive_fusion", True),)),
    _Replacement("cpp.CppScheduling._can_fuse_horizontal_impl", (_NODES,),
                 _not_when_reading_in_other_orders,
                 "nesting, not tiling, of loops that read a leaf in other orders"),
    _Replacement("cpp.CppScheduling._get_outer_loop_fusion_depth", (_NODES,),
                 _the_loop_over_the_leaves, "outer loop fusion over the leaves alone",
                 reads=("cpp.OuterLoopFusedSchedulerNode.get_outer_nodes",)),
    _Replacement("scheduler.Scheduler.can_fuse_vertical",
                 ((*_NODES, "index_equivalent_dep_names"), _NODES), _leaf_by_leaf_reads_nest,
                 "nesting of consumers that read their producer leaf by leaf",
                 reads=("scheduler.Scheduler.fusable_read_and_write",
                        "scheduler.Scheduler.get_backend",
                        "cpp.OuterLoopFusedSchedulerNode.get_outer_nodes",
                        *_CAN_SHARE_A_LOOP)),
    _Replacement("scheduler.SchedulerNode._compute_attrs",
                 (("self", "extra_indexing_constraints", "recompute_sizes_body_func"),),
                 _reductions_keep_the_leaf_loop, "a loop over the leaves for reductions",
                 reads=("ir.ComputedBuffer.get_reduction_type",
                        "ir.ComputedBuffer.get_default_sizes_body")),
)
