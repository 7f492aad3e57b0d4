"""Draws PyTorch autograd graphs with Graphviz to debug gradient flow.

:func:`make_dot` follows torchviz's and TorchOpt's pictures (grey backward functions, light blue
parameters, orange saved tensors, green outputs), fuses the many nodes of each differentiable
optimizer step into one node per parameter and step, and lists the parameters the output does not
reach (``dot.unreached``), which answers "why is my ``.grad`` None?".
:func:`tag_optimizer_step` marks the steps of your own optimizer loop so that they fuse too.
"""

from torchopt_fn._graph_tags import tag_optimizer_step
from torchopt_fn.visual._digraph import GradientGraph, GraphvizNotInstalledError, resize_graph
from torchopt_fn.visual._graph import NODE_MEANINGS, NODE_STYLES, make_dot
from torchopt_fn.visual._large import LARGE_GRAPH_NODES

__all__ = [
    "GradientGraph",
    "GraphvizNotInstalledError",
    "LARGE_GRAPH_NODES",
    "NODE_MEANINGS",
    "NODE_STYLES",
    "make_dot",
    "resize_graph",
    "tag_optimizer_step",
]
