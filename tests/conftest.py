"""Shared test helpers: run Python in a subprocess with N virtual CPU devices; load a repo
script (benchmarks/, configs/) as a module."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The suite's XLA:CPU programs are compiled at LLVM's lowest optimisation level, in one LLVM
# module (no split for parallel codegen, which on 2 cores costs more than it saves) and with
# XLA's classic elemental emitters instead of its MLIR fusion emitters: compiling dominates the
# suite (the DCGAN 1-vs-8 step: 11.8 CPU-s at XLA's defaults, 5.8 at O0 in one module, 2.9 with
# the classic emitters besides). The same programs, slower loops, and results equal to the
# defaults' up to the last bits (O2 contracts multiply-adds; the emitters round transcendental
# functions their own way): results are compared under the same flags. The benchmarks and
# every user run keep XLA's defaults; WGAN_JAX_TEST_XLA_FLAGS="" runs the tests at them too
# (.ci/run's Python 3.12 fast tier does).
TEST_XLA_FLAGS = os.environ.get(
    "WGAN_JAX_TEST_XLA_FLAGS",
    "--xla_backend_optimization_level=0 --xla_cpu_parallel_codegen_split_count=1 "
    "--xla_cpu_use_fusion_emitters=false")
if TEST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):  # xdist workers inherit it
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()


def xla_flags(devices: int) -> str:
    """XLA_FLAGS for a subprocess with `devices` virtual CPU devices (and the suite's flags)."""
    return f"--xla_force_host_platform_device_count={devices} {TEST_XLA_FLAGS}".strip()


def cpu_env(devices: int = 1, jax_platforms: str | None = "cpu") -> dict[str, str]:
    """This environment for a subprocess on `devices` virtual CPU devices (`xla_flags`);
    `jax_platforms=None` leaves JAX_PLATFORMS unset, as a user's shell has it."""
    env = dict(os.environ, XLA_FLAGS=xla_flags(devices))
    env.pop("JAX_PLATFORMS", None)
    if jax_platforms is not None:
        env["JAX_PLATFORMS"] = jax_platforms
    return env


def load_repo_file(relpath: str):
    """The module of the repo file `relpath`, loaded once per process (benchmarks/train_step.py
    defines absl flags at import: a second load would fail on duplicate flags)."""
    name = "repo_" + relpath.replace("/", "_").removesuffix(".py")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relpath))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while executing
        spec.loader.exec_module(module)
    return sys.modules[name]


def run_python(code: str, devices: int = 1, timeout: float = 1800, cwd: str | None = None):
    """Runs `code` in a fresh interpreter with `devices` CPU devices; returns CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
        env=cpu_env(devices), cwd=cwd or REPO,
    )


def run_json(code: str, *argv: str, devices: int = 1, timeout: float = 1800):
    """Runs `code` with `sys.argv[1:] = argv` on `devices` CPU devices in a fresh interpreter,
    fails the test with its stderr if it fails, and returns the JSON of its last stdout line:
    the harness of the 1-vs-8-device tests (each runs its cases once per device count)."""
    result = run_python(f"import sys; sys.argv = ['x', *{list(argv)!r}]\n" + code,
                        devices=devices, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_module(args: list[str], devices: int = 1, timeout: float = 1800, cwd: str | None = None,
               jax_platforms: str | None = "cpu"):
    """Runs `python -m ...args` with `devices` CPU devices; returns CompletedProcess.
    `jax_platforms=None` leaves JAX_PLATFORMS unset, as a user's shell has it."""
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout,
        env=cpu_env(devices, jax_platforms), cwd=cwd or REPO,
    )


def assert_one_error_line(result, words: list[str]) -> str:
    """A command that refused its input: exit 2, no traceback, exactly one non-empty stderr
    line `error: ...` holding each of `words`; returns the line."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def repo() -> str:
    return REPO
