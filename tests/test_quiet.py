"""A library call prints nothing the user did not ask for, and the README's first command prints
only the trainer's own lines: no orbax notes from `runs.load_run` (a read-only checkpoint
directory), no matplotlib "generated new fontManager" on a fresh machine."""

from __future__ import annotations

import logging
import re

import pytest
from conftest import run_module, run_python

from wgan_jax import checkpoint

OUR_LINE = re.compile(r"^\d\d:\d\d:\d\d ")  # cli.setup_logging's format


def _orbax_record(message: str) -> logging.LogRecord:
    return logging.LogRecord("absl", logging.WARNING, "/site-packages/orbax/checkpoint/x.py", 1,
                             message, None, None)


def test_read_only_notes_are_dropped_only_while_the_manager_is_made():
    absl = logging.getLogger("absl")
    before = list(absl.filters)
    note = _orbax_record("Given directory is read only=/run/checkpoints")
    other = _orbax_record("preemption sync point reached")
    with checkpoint._read_only_notes_quiet(True):
        assert not absl.filter(note)
        assert absl.filter(other)
    assert absl.filters == before and absl.filter(note)
    with checkpoint._read_only_notes_quiet(False):
        assert absl.filter(note)


@pytest.mark.slow  # subprocesses: the README's first command (3 iterations), then load_run
def test_the_first_command_and_load_run_print_only_what_was_asked(tmp_path, monkeypatch):
    mpl = tmp_path / "mpl"  # a fresh machine's empty matplotlib cache
    mpl.mkdir()
    monkeypatch.setenv("MPLCONFIGDIR", str(mpl))
    workdir = tmp_path / "run"
    # JAX_PLATFORMS unset, as in a user's shell: libtpu (the test extra) starts nowhere but on
    # a TPU (cli.skip_absent_tpu), so its "TPU worker hostnames" screen is not printed either
    result = run_module(["wgan_jax.main", f"--workdir={workdir}", "--config.num_iterations=3"],
                        timeout=600, jax_platforms=None)
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(mpl.glob("fontlist-*.json")), "matplotlib built its font cache in this run"
    stray = [line for line in result.stderr.splitlines() if not OUR_LINE.match(line)]
    assert not stray, stray
    assert "fontManager" not in result.stderr

    loaded = run_python(
        "from wgan_jax import runs\n"
        f"run = runs.load_run({str(workdir)!r})\n"
        "assert run.step == 3, run.step\n")
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert (loaded.stdout, loaded.stderr) == ("", "")
