"""Multi-process exactness on localhost: 2 processes x 2 CPU devices == 1 process x 4 devices.

Each run is a subprocess with `XLA_FLAGS=--xla_force_host_platform_device_count=N` (gloo CPU
collectives). A worker runs the trainer's own pieces (pipeline, state, step) and dumps the
generator parameters each process holds; the CLI runs `wgan_jax.main` with the multi-host
flags and its checkpoint is read back with `wgan_jax.runs.load_run`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import cpu_env

pytestmark = pytest.mark.slow  # subprocesses or whole runs

ITERATIONS = 3
OVERRIDES = [
    f"--config.num_iterations={ITERATIONS}", "--config.model.width=64",
    "--config.global_batch_size=64", "--config.log_every=1", "--config.sample_every=0",
    "--config.plot_every=0", "--config.diagnostics.level=off",
]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "toy_25gaussians.py")

WORKER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import jax
    n, pid, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if n > 1:
        jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=pid)
    from wgan_jax.config import data_shape
    from wgan_jax.data.spec import DataSpec
    from wgan_jax.input_pipeline import create_input_pipeline
    from wgan_jax.state import create_train_state
    from wgan_jax.step import StepConfig, make_mesh, make_train_step
    from wgan_jax.train import build_gan, replicate
    sys.path.insert(0, sys.argv[5])
    import toy_25gaussians
    c = toy_25gaussians.get_config()
    c.num_iterations, c.model.width, c.global_batch_size = ITERATIONS, 64, 64
    c.diagnostics.level = "off"
    mesh = make_mesh()
    it = create_input_pipeline(DataSpec.from_config(c), mesh)
    gan = build_gan(c)
    state = replicate(create_train_state(gan, data_shape(c), c.seed, False), mesh)
    step = make_train_step(StepConfig.from_config(c), mesh, gan)
    for _ in range(c.num_iterations):
        state, metrics = step(state, next(it))
    leaves = jax.tree_util.tree_leaves_with_path(state.g_params)
    local = {jax.tree_util.keystr(k): np.asarray(v.addressable_data(0)) for k, v in leaves}
    np.savez(out, **local)
    print("done", jax.process_count(), jax.device_count())
    """
).replace("ITERATIONS", str(ITERATIONS))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(commands: list[list[str]], devices: int) -> list[subprocess.CompletedProcess]:
    procs = [
        subprocess.Popen(cmd, env=cpu_env(devices), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=ROOT)
        for cmd in commands
    ]
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=1500)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    for r in results:
        assert r.returncode == 0, r.stderr[-3000:]
    return results


def _relative(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    assert sorted(a) == sorted(b)
    diff = sum(float(np.sum((a[k].astype(np.float64) - b[k]) ** 2)) for k in a)
    norm = sum(float(np.sum(b[k].astype(np.float64) ** 2)) for k in a)
    return (diff / norm) ** 0.5


@pytest.fixture(scope="module")
def one_process_four_devices(tmp_path_factory) -> dict[str, np.ndarray]:
    tmp = tmp_path_factory.mktemp("single")
    worker = tmp / "worker.py"
    worker.write_text(WORKER)
    out = tmp / "params.npz"
    _launch([[sys.executable, str(worker), "1", "0", "0", str(out), os.path.dirname(CONFIG)]], 4)
    return dict(np.load(out))


def test_two_processes_hold_identical_params_equal_to_one_process(
    tmp_path, one_process_four_devices
):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    port = str(_free_port())
    outs = [tmp_path / f"params_{i}.npz" for i in range(2)]
    _launch(
        [[sys.executable, str(worker), "2", str(i), port, str(outs[i]), os.path.dirname(CONFIG)]
         for i in range(2)],
        2,
    )
    p0, p1 = (dict(np.load(o)) for o in outs)
    for key in p0:
        np.testing.assert_array_equal(p0[key], p1[key], err_msg=key)
    assert _relative(p0, one_process_four_devices) <= 1e-5


def test_cli_two_processes_checkpoint_equals_one_process(tmp_path, one_process_four_devices):
    workdir = tmp_path / "run"
    port = str(_free_port())
    base = [sys.executable, "-m", "wgan_jax.main", f"--config={CONFIG}", f"--workdir={workdir}",
            *OVERRIDES, f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2"]
    results = _launch([[*base, f"--process_id={i}"] for i in range(2)], 2)
    assert "topology: processes=2" in results[0].stderr
    assert "topology" not in results[1].stderr  # only process 0 logs
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == ITERATIONS  # written once, by process 0
    assert (workdir / "checkpoints").is_dir()

    import jax

    from wgan_jax.runs import load_run

    _, _, state, step = load_run(str(workdir))
    assert step == ITERATIONS
    leaves = jax.tree_util.tree_leaves_with_path(state.g_params)
    params = {jax.tree_util.keystr(k): np.asarray(v) for k, v in leaves}
    assert _relative(params, one_process_four_devices) <= 1e-5
