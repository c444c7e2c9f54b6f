"""benchmarks/remedies.py and benchmarks/small_data.py run end to end at 8 px and print their
tables; every row's workdir trained with that row's overrides (read back from config.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from common import config_value  # noqa: E402


def _run(script: str, *args: str) -> str:
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", script), *args],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout


def _table(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in out.splitlines() if line.startswith("|")]


def _check_overrides(rows: list[dict]) -> None:
    for row in rows:
        with open(os.path.join(row["workdir"], "config.json")) as f:
            written = json.load(f)
        assert row["overrides"], row["row"]
        for key, value in row["overrides"].items():
            assert config_value(written, key) == value, (row["row"], key)


@pytest.mark.slow
def test_remedies_table_rows_and_overrides(tmp_path):
    rows_file = tmp_path / "rows.jsonl"
    out = _run("remedies.py", "--only", "combined", "--image_size", "8",
               "--num_iterations", "12", "--dataset_size", "100", "--root", str(tmp_path),
               "--rows", str(rows_file))
    table = _table(out)
    assert table[0][:7] == ["Row", "Config + overrides", "Diagnose", "Rules fired (first step)",
                            "Evaluated step", "FID vs held-out", "Coverage"]
    assert [r[0] for r in table[2:]] == ["combined", "floor: real training pool"]
    assert all(float(r[5]) >= 0 for r in table[2:])
    assert table[2][2] in ("healthy", "**problems**")
    assert "model.critic_norm=spectral" in table[2][1] and "augment=" in table[2][1]
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert [r["row"] for r in rows] == ["combined"]
    assert set(rows[0]["overrides"]) >= {"model.critic_norm", "instance_noise", "augment",
                                         "dataset_size", "num_iterations", "image_size"}
    _check_overrides(rows)
    assert os.path.getsize(tmp_path / "remedies.png") > 0
    again = _run("remedies.py", "--table_from", str(rows_file), "--grid",
                 str(tmp_path / "again.png"))
    assert _table(again) == table


@pytest.mark.slow
def test_small_data_table_rows_and_overrides(tmp_path):
    rows_file = tmp_path / "rows.jsonl"
    out = _run("small_data.py", "--sizes", "50", "--diffaugment", "yes", "--image_size", "8",
               "--num_iterations", "3", "--root", str(tmp_path), "--rows", str(rows_file))
    table = _table(out)
    assert table[0][:5] == ["Training digits", "DiffAugment", "Iterations", "FID vs held-out",
                            "Change"]
    assert [r[:3] for r in table[2:]] == [["50", "translation,cutout,color", "3"],
                                          ["floor: the 1,500 real training-pool digits", "-", "-"]]
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert [r["augment"] for r in rows] == ["translation,cutout,color"]
    _check_overrides(rows)


def test_spectral_rows_replace_the_critics_batchnorm():
    """The rows with spectral norm have no BatchNorm left in D (the base config has three)."""
    import jax
    import jax.numpy as jnp
    from common import apply_overrides, load_config
    from remedies import ROWS

    from wgan_jax.runs import build_networks

    def critic_collections(overrides: dict) -> dict:
        config = load_config("dcgan_collapse")
        apply_overrides(config, overrides)
        _, critic = build_networks(config, None, None)
        shape = jnp.zeros((2, config.image_size, config.image_size, config.num_channels))
        variables = jax.eval_shape(lambda: critic.init(jax.random.PRNGKey(0), shape, train=False))
        return {k: sorted(v) for k, v in variables.items()}

    assert "batch_stats" in critic_collections({})
    spectral = [r for r in ROWS if r[2].get("model.critic_norm") == "spectral"]
    assert {r[0] for r in spectral} == {"spectral", "combined"}
    for _, _, overrides, _ in spectral:
        variables = critic_collections(overrides)
        assert "batch_stats" not in variables
        assert not any("BatchNorm" in name for name in variables["params"])
        assert len(variables["spectral_norm"]) == 5  # four convolutions and the output layer
