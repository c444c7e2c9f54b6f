"""The accelerator extras are declared, keep the base jax range, and are what the docs say.

The registry look-ups behind them (the wheels exist for Python 3.11 and 3.12) are recorded in
docs/accelerators.md; this test needs no network.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_cuda_and_tpu_extras_are_jax_own_extras_over_the_base_range():
    project = _project()
    extras = project["optional-dependencies"]
    # jax's own extras pin jax-cuda12-plugin[with-cuda] / libtpu to the installed jax's exact
    # version, so the plugin always matches the jax pip picks.
    assert extras["cuda"] == ["jax[cuda12]>=0.10"]
    assert extras["cuda13"] == ["jax[cuda13]>=0.10"]
    assert extras["tpu"] == ["jax[tpu]>=0.10"]
    (base,) = [d for d in project["dependencies"] if re.match(r"jax\b(?![-\w])", d)]
    assert base == "jax>=0.10"
    for spec in (*extras["cuda"], *extras["cuda13"], *extras["tpu"]):
        assert spec.endswith(base.removeprefix("jax")), spec


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def test_docs_name_the_extras_next_to_the_set_up_commands():
    setup = _section((ROOT / "README.md").read_text(), "## Set up and run")
    assert 'pip install ".[cuda]"' in setup and 'pip install ".[tpu]"' in setup
    assert "docs/accelerators.md" in setup
    docs = (ROOT / "docs" / "accelerators.md").read_text()
    for name in ('pip install ".[cuda]"', 'pip install ".[cuda13]"', 'pip install ".[tpu]"',
                 "jax[cuda12]", "jax[cuda13]", "jax[tpu]", "jax-cuda12-plugin",
                 "jax-cuda13-plugin", "jax-cuda12-pjrt", "libtpu"):
        assert name in docs, name


def test_tpu_install_script_uses_the_extra():
    script = (ROOT / "scripts" / "tpu" / "install.sh").read_text()
    assert '"${REMOTE_DIR}[tpu,gcs]"' in script
    assert "jax[tpu]}" not in script  # no separate default JAX spec beside the extra
