"""Bad data inputs through the CLI: exit status 2, one line naming the dataset or file, and
nothing written to the workdir."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # subprocesses or whole runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "wgan_jax.main", f"--config={ROOT}/configs/digits.py",
        f"--workdir={tmp_path / 'work'}", f"--config.data_dir={tmp_path / 'data'}",
        "--config.num_iterations=1", *overrides,
    ]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env, cwd=ROOT)


def _folder(tmp_path, corrupt: bool):
    root = tmp_path / "imgs"
    (root / "sub").mkdir(parents=True)
    if corrupt:
        from PIL import Image

        Image.new("RGB", (8, 8)).save(root / "sub" / "ok.png")
        (root / "sub" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    return root


@pytest.mark.parametrize(
    "case,expect",
    [
        ("unknown", "bogus"),
        ("tfds_missing", "tfds:mnist"),
        ("empty_folder", "no PNG or JPEG"),
        ("corrupt_folder", "broken.jpg"),
    ],
)
def test_bad_data_exits_2_with_one_line(tmp_path, case, expect):
    if case == "unknown":
        result = _run(tmp_path, "--config.dataset=bogus")
    elif case == "tfds_missing":
        (tmp_path / "data").mkdir()
        result = _run(tmp_path, "--config.dataset=tfds:mnist")
    else:
        root = _folder(tmp_path, corrupt=case == "corrupt_folder")
        result = _run(tmp_path, f"--config.dataset=folder:{root}")
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expect in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "work").exists()
