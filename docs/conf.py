"""Sphinx configuration of the wgan_jax site: the Markdown pages (MyST) and the API reference
(autodoc, from the docstrings).

Build it from the repository root with `python -m sphinx -W -n -c docs -b html . build/docs`
(the `docs` extra: `pip install -e ".[docs]"`). The source directory is the repository root,
so README.md, ARCHITECTURE.md, CHANGELOG.md, docs/*.md and benchmarks/*.md link to each other
as they do on disk; nothing else there is read (`include_patterns`).

`-W -n` makes the build a check: a Markdown link or anchor that does not resolve, a docstring
that is not valid reStructuredText, a cross-reference to a name of this package that the
reference does not document (the types in every signature), and a public name without a
docstring (`_undocumented` below) each fail it. Docstrings are prose with `backticks` for code
(`default_role = "code"`), so backticks make no cross-references; the signatures' types do.
"""

from __future__ import annotations

import os
import sys

from sphinx.util import logging

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "src")))
from wgan_jax import __version__  # noqa: E402  (after the path: a build needs no install)

project = "wgan_jax"
author = "wgan_jax developers"
copyright = "wgan_jax developers"  # noqa: A001
release = version = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc"]
root_doc = "docs/index"
include_patterns = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md", "docs/**.md",
                    "benchmarks/*.md"]
exclude_patterns = ["build", "**/.*"]
source_suffix = {".md": "markdown"}

html_theme = "furo"
html_title = f"wgan_jax {release}"
html_extra_path = ["_extra"]  # build/docs/index.html: a link to the site's first page

# Markdown: GitHub's heading anchors (`page.md#a-heading`), for every heading level.
myst_heading_anchors = 6

# Docstrings: `x` is code; types in signatures link to the reference.
default_role = "code"
nitpicky = True
# Other packages' types (no inventories are fetched: the build works offline).
nitpick_ignore_regex = [
    (r"py:.*", r"(jax|jaxlib|flax|optax|orbax|numpy|np|ml_collections|grain|PIL|etils|scipy"
               r"|collections|contextlib|typing|types|logging|pathlib|argparse|abc|threading"
               r"|concurrent|tensorflow_datasets|tensorboardX|matplotlib|os)(\..*)?"),
    # private names (a public method may return one: not documented, not public), TypeVars
    (r"py:.*", r"wgan_jax(\.\w+)*\._\w+|wgan_jax\.precision\.F"),
    (r"py:class", r"tuple\[.*"),  # a flax dataclass field's `tuple[int, ...]`, split by autodoc
    (r"py:.*", r"(Array|ArrayLike|NDArray|ndarray|Mesh|ConfigDict|FrozenConfigDict|PyTree|Any"
               r"|Callable|Iterator|Iterable|Sequence|Mapping|Hashable|GradientTransformation"
               r"|Schedule|Module|PRNGKey|Path|Logger|TypeVar|F|T|P|ShapeDtypeStruct)"),
]
autodoc_default_options = {"members": True, "undoc-members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_class_signature = "mixed"
autodoc_inherit_docstrings = True
python_display_short_literal_types = True

_log = logging.getLogger("wgan_jax.docs")
_CHECKED = ("module", "class", "exception", "function", "method", "property", "data")


def _undocumented(app, what, name, obj, options, lines):  # noqa: ANN001, ANN202
    """A public name (what autodoc documents: `__all__`, a public class's methods) without a
    docstring is a warning, so `-W` fails on it. Class attributes (dataclass fields) are left
    to their class's docstring."""
    del app, obj, options
    if what in _CHECKED and not any(line.strip() for line in lines):
        _log.warning(f"{name} has no docstring (a public name must say what it is)",
                     type="wgan_jax", subtype="undocumented")


def setup(app):  # noqa: ANN001, ANN201
    app.connect("autodoc-process-docstring", _undocumented)
