"""Shared test helpers: run Python in a subprocess with N virtual CPU devices."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, devices: int = 1, timeout: float = 1800, cwd: str | None = None):
    """Runs `code` in a fresh interpreter with `devices` CPU devices; returns CompletedProcess."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
        env=env, cwd=cwd or REPO,
    )


def run_module(args: list[str], devices: int = 1, timeout: float = 1800, cwd: str | None = None):
    """Runs `python -m ...args` with `devices` CPU devices; returns CompletedProcess."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout,
        env=env, cwd=cwd or REPO,
    )


@pytest.fixture
def repo() -> str:
    return REPO
