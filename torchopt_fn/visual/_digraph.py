"""What :func:`make_dot` returns: a :class:`graphviz.Digraph` that explains a missing ``dot``."""

from __future__ import annotations

import functools
from typing import Any

import graphviz

INSTALL_HINT = """the Graphviz `dot` program was not found on PATH; it is needed to render the graph
(building it, and reading `.source`, works without it). Install Graphviz:
  Debian/Ubuntu:  sudo apt-get install graphviz
  macOS:          brew install graphviz
  conda:          conda install -c conda-forge graphviz
  other:          https://graphviz.org/download/"""


class GraphvizNotInstalledError(graphviz.ExecutableNotFound):
    """Rendering needs Graphviz's ``dot`` program, which is not installed."""

    def __init__(self) -> None:
        RuntimeError.__init__(self, INSTALL_HINT)


def _explain_missing_dot(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except graphviz.ExecutableNotFound as error:
            if isinstance(error, GraphvizNotInstalledError):
                raise
            raise GraphvizNotInstalledError() from error
    return wrapper


class GradientGraph(graphviz.Digraph):
    """A :class:`graphviz.Digraph` of an autograd graph, with what the walk found out.

    Renders like any ``Digraph`` (``.render(format='svg')``, ``.pipe(format='png')``, inline in
    Jupyter); a missing ``dot`` program raises :class:`GraphvizNotInstalledError` saying how to
    install it.

    Attributes:
      unreached: Names of the ``params`` that the outputs do not depend on: after
        ``backward()`` their ``.grad`` stays ``None``.
      untracked: Names of the ``params`` that do not require grad and alias no tensor of the
        graph (frozen parameters, buffers, detached copies): autograd does not record where
        they are used, so whether the outputs depend on them is unknown.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unreached: list[str] = []
        self.untracked: list[str] = []

    pipe = _explain_missing_dot(graphviz.Digraph.pipe)
    render = _explain_missing_dot(graphviz.Digraph.render)

    def copy(self) -> GradientGraph:
        """A copy of the graph, its attributes and its ``unreached`` and ``untracked`` lists."""
        duplicate = super().copy()
        duplicate.unreached = list(self.unreached)
        duplicate.untracked = list(self.untracked)
        return duplicate


def resize_graph(dot: graphviz.Digraph, size_per_element: float = 0.5,
                 min_size: float = 12.0) -> None:
    """Sets the drawing size of ``dot`` from how many statements it has, in place.

    Args:
      dot: The graph to resize.
      size_per_element: Inches per node or edge statement.
      min_size: Smallest width and height, in inches.
    """
    size = max(min_size, len(dot.body) * size_per_element)
    dot.graph_attr.update(size=f"{size},{size}")
