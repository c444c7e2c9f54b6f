"""`python -m wgan_jax.export`: the file it writes, loaded in a virtual environment that holds
only jax, jaxlib and flatbuffers, samples what `python -m wgan_jax.sample` writes, bit for bit
on CPU, at two batch sizes; docs/export.md's blocks run as written; bad input is one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import flatbuffers
import jax
import jaxlib
import numpy as np
import pytest
from conftest import REPO, TEST_XLA_FLAGS, assert_one_error_line, run_module

pytestmark = pytest.mark.slow  # subprocesses, a trained run, a virtual environment

GUIDE = os.path.join(REPO, "docs", "export.md")
# a marker per Python block of the guide (tests/test_readme.py checks there are no others)
MARKERS = ("portable.export_generator", "export.deserialize")


def _guide_block(marker: str) -> str:
    with open(GUIDE) as f:
        (block,) = [b for b in re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
                    if marker in b]
    return block


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    """2 iterations of an 8 px digits DCGAN with BatchNorm (the program, not the quality)."""
    workdir = str(tmp_path_factory.mktemp("export") / "run")
    result = run_module([
        "wgan_jax.main", f"--workdir={workdir}", "--config.dataset=digits",
        "--config.image_size=8", "--config.num_channels=1", "--config.model.kind=dcgan",
        "--config.model.width=8", "--config.model.z_dim=16", "--config.global_batch_size=16",
        "--config.n_critic=1", "--config.num_iterations=2", "--config.sample_every=0",
        "--config.eval_every=0",
    ])
    assert result.returncode == 0, result.stderr[-2000:]
    return workdir


@pytest.fixture(scope="module")
def jax_only_python(tmp_path_factory) -> str:
    """The interpreter of a fresh virtual environment with this jax, jaxlib and flatbuffers
    installed from the package index, and nothing else of ours (no wgan_jax, flax, optax,
    orbax). About 20 s from the local mirrors."""
    venv = str(tmp_path_factory.mktemp("jax_only") / "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    python = os.path.join(venv, "bin", "python")
    pins = [f"jax=={jax.__version__}", f"jaxlib=={jaxlib.__version__}",
            f"flatbuffers=={flatbuffers.__version__}"]
    result = subprocess.run([python, "-m", "pip", "install", "-q", *pins],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return python


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> tuple[str, str]:
    """`python -m wgan_jax.export` of the trained run: (the file, the command's stdout)."""
    out = str(tmp_path_factory.mktemp("exported") / "generator.jaxexport")
    result = run_module(["wgan_jax.export", f"--workdir={trained}", f"--out={out}"])
    assert result.returncode == 0, result.stderr[-2000:]
    return out, result.stdout


def _jax_only(python: str, code: str, cwd: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = TEST_XLA_FLAGS  # the flags `sample` ran at: bit-equal under the same
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=cwd,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_the_exported_generator_samples_what_sample_writes_with_jax_alone(
        trained, exported, jax_only_python, tmp_path):
    out, stdout = exported
    assert f"wrote the generator of checkpoint 2 (weights) for cpu, cuda, tpu, any batch " \
           f"size, to {out}" in stdout
    assert "note:" not in stdout
    with open(out + ".json") as f:
        meta = json.load(f)
    assert meta["z_dim"] == 16 and meta["output"]["shape"] == ["batch", 8, 8, 1]
    assert meta["checkpoint_step"] == 2 and meta["platforms"] == ["cpu", "cuda", "tpu"]
    assert meta["program_bytes"] == os.path.getsize(out)

    expected = {}
    for num in (16, 5):
        path = str(tmp_path / f"sample{num}.npy")
        result = run_module(["wgan_jax.sample", f"--workdir={trained}", f"--num={num}",
                             "--seed=0", f"--out={path}"])
        assert result.returncode == 0, result.stderr[-2000:]
        expected[num] = np.load(path)

    # docs/export.md's loader, as written, then 5 latents more, in the jax-only environment
    code = _guide_block("export.deserialize") + (
        "import importlib.util, sys\n"
        "import numpy as np\n"
        "np.save('loaded16.npy', samples)\n"
        "np.save('loaded5.npy', generator.call(jax.random.normal(jax.random.PRNGKey(0), "
        "(5, z_dim))))\n"
        "ours = ('wgan_jax', 'flax', 'optax', 'orbax')\n"
        "print([m for m in ours if importlib.util.find_spec(m) is not None])\n")
    for name in (out, out + ".json"):  # the loader reads them from its directory
        shutil.copy(name, tmp_path)
    result = _jax_only(jax_only_python, code, str(tmp_path))
    assert result.stdout.strip().splitlines()[-1] == "[]"  # none of them is there
    for num in (16, 5):
        loaded = np.load(str(tmp_path / f"loaded{num}.npy"))
        assert loaded.shape == (num, 8, 8, 1) and loaded.dtype == np.float32
        np.testing.assert_array_equal(loaded, expected[num])


def test_the_guides_python_export_writes_what_the_command_writes(trained, exported, tmp_path,
                                                                monkeypatch):
    from jax import export

    from wgan_jax import runs

    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    block = _guide_block("portable.export_generator").replace('"runs/digits"', repr(trained))
    exec(compile(block, GUIDE, "exec"), namespace)
    files = {}
    for path in (str(tmp_path / "generator.jaxexport"), exported[0]):
        with open(path + ".json") as f:
            meta = json.load(f)
        with open(path, "rb") as f:
            program = export.deserialize(bytearray(f.read()))
        files[path] = meta, program
    (mine, program), (theirs, cli_program) = files.values()
    for meta in (mine, theirs):  # the programs' source locations name their callers
        del meta["program_bytes"], meta["program_sha256"]
    assert mine == theirs
    z = runs.block_latents(1, 0, 7, 16)
    np.testing.assert_array_equal(program.call(z), cli_program.call(z))


def _objects_workdir(trained: str, root) -> str:
    """A workdir whose config.json says its generator was passed as an object."""
    workdir = root / "objects"
    workdir.mkdir()
    with open(os.path.join(trained, "config.json")) as f:
        saved = json.load(f)
    saved["networks_passed_as_objects"] = ["generator"]
    (workdir / "config.json").write_text(json.dumps(saved))
    return str(workdir)


BAD = [
    ("no_checkpoints", [], ["no checkpoint in"]),
    ("unknown_platform", ["--platforms=cpu,metal"],
     ["--platforms", "'metal'", "cpu, cuda, rocm, tpu"]),
    ("unwritable_out", ["--out={file}/generator.jaxexport"], ["--out", "is not a directory"]),
    ("objects", [], ["generator passed as an object", "portable.export_generator(runs.load_run(",
                     "generator=...)"]),
]


@pytest.mark.parametrize("case, args, words", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_one_line_and_writes_nothing(trained, tmp_path, case, args, words):
    if case == "objects":
        workdir = _objects_workdir(trained, tmp_path)
    elif case == "no_checkpoints":
        workdir = str(tmp_path / "fresh")
        os.makedirs(workdir)
        shutil.copy(os.path.join(trained, "config.json"), workdir)
    else:
        workdir = trained
    (tmp_path / "file").write_text("")
    before = sorted(os.listdir(workdir))
    out = str(tmp_path / "out" / "generator.jaxexport")
    args = [a.format(file=tmp_path / "file") for a in args]
    if not any(a.startswith("--out") for a in args):
        args.append(f"--out={out}")
    result = run_module(["wgan_jax.export", f"--workdir={workdir}", *args])
    assert_one_error_line(result, words)
    assert sorted(os.listdir(workdir)) == before
    assert not os.path.exists(tmp_path / "out")
    assert (tmp_path / "file").read_text() == ""
