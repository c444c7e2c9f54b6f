"""Reading a run's config.json."""

from __future__ import annotations

import json
import logging

import pytest

from wgan_jax import runs
from wgan_jax.config import get_config_schema
from wgan_jax.errors import UserError


def _write(tmp_path, saved) -> str:
    (tmp_path / "config.json").write_text(json.dumps(saved))
    return str(tmp_path)


def test_config_json_over_defaults_warns_naming_unknown_keys(tmp_path, caplog):
    saved = {"n_critic": 3, "model": {"width": 16, "no_such_width": 2,
                                       "generator": "pkg.nets:make"},
             "old_top_key": 1, "eval": {"metric": "w1"}}
    with caplog.at_level(logging.WARNING, logger="wgan_jax"):
        config = runs.load_config_json(_write(tmp_path, saved))
    assert config.n_critic == 3 and config.model.width == 16 and config.eval.metric == "w1"
    assert config.model.generator == "pkg.nets:make"
    assert config.global_batch_size == get_config_schema().global_batch_size
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "model.no_such_width" in warning and "old_top_key" in warning
    assert "n_critic" not in warning and "model.width" not in warning


def test_config_json_that_fits_gives_no_warning(tmp_path, caplog):
    saved = json.loads(get_config_schema().to_json_best_effort())
    with caplog.at_level(logging.WARNING, logger="wgan_jax"):
        runs.load_config_json(_write(tmp_path, saved))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("saved, words", [
    ({"n_critic": "many"}, ["n_critic", "'many'", "int"]),
    ({"model": 3}, ["model", "object"]),
    ([1, 2], ["JSON object"]),
])
def test_bad_config_json_is_one_user_error(tmp_path, saved, words):
    with pytest.raises(UserError) as error:
        runs.load_config_json(_write(tmp_path, saved))
    for word in words:
        assert word in str(error.value)


def test_missing_config_json(tmp_path):
    with pytest.raises(UserError, match="not found"):
        runs.load_config_json(str(tmp_path))
    assert runs.read_config_dict(str(tmp_path)) is None


@pytest.mark.parametrize("which, expected", [("latest", "latest"), ("best", "best"),
                                             ("120", 120)])
def test_parse_checkpoint(which, expected):
    assert runs.parse_checkpoint(which) == expected


def test_parse_checkpoint_refuses_other_names():
    with pytest.raises(ValueError, match="latest, best or a step number, got 'newest'"):
        runs.parse_checkpoint("newest")
