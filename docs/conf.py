"""Sphinx configuration of the documentation site (build command in the README)."""

import pathlib
import sys

DOCS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))

project = "optax-compat"
author = "optax-compat contributors"
copyright = "the optax-compat contributors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "myst_nb",
    "apiref",
    "visual_legend",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "notebooks/*.py"]

# The notebooks are executed by tests/test_notebooks.py; the site shows their stored outputs.
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

autosummary_generate = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# Annotations that autodoc cannot evaluate (imported only for type checking) stay bare names,
# which the py domain cannot resolve uniquely; apiref qualifies these in each package's signatures.
apiref_qualified_annotations = {
    "torchopt_fn": {"MetaOptimizer": "torchopt_fn.MetaOptimizer",
                    "GradientTransformation": "torchopt_fn.base.GradientTransformation"},
}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Broken cross-references in docstrings fail the build. Type annotations are left out of this
# check: they name classes of other libraries and type aliases that have no page here, and the
# build runs offline (no intersphinx inventories of PyTorch or Python).
nitpicky = True
# Private modules (``optax_compat._src``, ``optax_compat._runtime``) have no pages by design.
nitpick_ignore_regex = [
    ("py:class", r".*"),
    (r"py:(func|mod)", r"optax_compat\._(src|runtime)\..*"),
    (r"py:(func|meth|exc|data|mod|attr|obj)",
     r"(torch|graphviz|functools|operator|os|collections|typing|optree|numpy)\..*"),
]

html_theme = "furo"
html_title = "optax-compat"
