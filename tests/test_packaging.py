"""Release hygiene: the version is written in one place (`wgan_jax.__version__`, which
setuptools reads into the package's metadata), and the package ships its `py.typed` marker.
The built wheel and sdist themselves are checked by .ci/run (scripts/check_dist.py, twine, and
the README's first command run from the wheel in a fresh virtual environment)."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
import tomllib

import wgan_jax

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_written_once_and_the_metadata_agrees():
    pyproject = _pyproject()
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "wgan_jax.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", wgan_jax.__version__)
    assert importlib.metadata.version("wgan_jax") == wgan_jax.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {wgan_jax.__version__}" in changelog, "CHANGELOG.md has no entry for it"


def test_the_package_ships_py_typed():
    assert (ROOT / "src" / "wgan_jax" / "py.typed").is_file()
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["wgan_jax"]
