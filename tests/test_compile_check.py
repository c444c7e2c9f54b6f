"""The real TPU compiler (libtpu) on this CPU machine: the trainer's programs compiled for TPU
slices that are not here, what they hold, communicate and compute, and the refusals.

libtpu comes with the test extra. Where it is missing these tests skip with the reason, except
under WGAN_JAX_REQUIRE_LIBTPU=1 (.ci/run), where they fail: CI must run them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
from conftest import REPO, assert_one_error_line, run_json, run_module

from wgan_jax import targets
from wgan_jax.errors import UserError

HAVE_LIBTPU = importlib.util.find_spec("libtpu") is not None
if not HAVE_LIBTPU and os.environ.get("WGAN_JAX_REQUIRE_LIBTPU") == "1":
    raise RuntimeError("libtpu is missing and WGAN_JAX_REQUIRE_LIBTPU=1: install the test "
                       "extra (pip install -e '.[test]'), which brings JAX's tpu extra")
# The compiling tests are the slow tier's too: about 80 s for this file on 2 cores.
needs_libtpu = pytest.mark.skipif(not HAVE_LIBTPU, reason="libtpu (JAX's tpu extra) is not "
                                  "installed: pip install -e '.[test]'")


@pytest.mark.parametrize("name, generation, shape, chips, hosts", [
    ("v5e:2x2", "v5e", (2, 2), 4, 1),
    ("v5litepod-16", "v5e", (4, 4), 16, 4),
    ("v5e-256", "v5e", (16, 16), 256, 64),
    ("v4-8", "v4", (2, 2, 1), 4, 1),
    ("v4-32", "v4", (2, 2, 4), 16, 4),
    ("v4:2x2x2", "v4", (2, 2, 2), 8, 2),
    ("v5p-128", "v5p", (4, 4, 4), 64, 16),
    ("v6e-256", "v6e", (16, 16), 256, 64),
    ("v6e-8", "v6e", (2, 4), 8, 1),
])
def test_slice_names_in_both_forms(name, generation, shape, chips, hosts):
    t = targets.target(name)
    assert (t.chip.generation, t.shape, t.chips, t.hosts) == (generation, shape, chips, hosts)


@pytest.mark.parametrize("name", ["v5e", "v5e:4", "v4:2x2", "v9-8", "v4-7", "v5litepod-12",
                                  "tpu", "v5e:4x4x4", "v5e:3x3", "v4:3x2x2"])
def test_unknown_slice_names_are_refused_naming_the_forms(name):
    with pytest.raises(UserError, match="unknown TPU topology.*v5litepod-16"):
        targets.target(name)


def test_flops_are_counted_on_the_cpu_and_never_read_as_zero(monkeypatch):
    # On a GPU the lowered step reports no cost analysis: the GPU table once printed 0 GFLOP.
    from wgan_jax import compile_check
    from wgan_jax.default_config import get_config

    seen = {}

    class Lowered:
        def __init__(self, cost):
            self.cost = cost

        def cost_analysis(self):
            return self.cost

    def lower_step(config, mesh, batch, gan, platform, *, unroll_critic=False):
        seen.update(platforms={d.platform for d in mesh.devices.flat}, platform=platform,
                    unroll=unroll_critic)
        return Lowered(seen["cost"])

    monkeypatch.setattr(compile_check, "lower_step", lower_step)
    seen["cost"] = {"flops": 3.0e9}
    assert compile_check.model_flops(get_config(), 8) == 3.0e9
    assert seen == {"platforms": {"cpu"}, "platform": "cpu", "unroll": True,
                    "cost": {"flops": 3.0e9}}
    seen["cost"] = None
    with pytest.raises(RuntimeError, match="no FLOPs"):
        compile_check.model_flops(get_config(), 8)


def test_a_batch_that_does_not_split_over_the_chips_is_refused_naming_a_multiple():
    assert targets.per_chip_batch(512, targets.target("v5litepod-16")) == 32
    with pytest.raises(UserError, match=r"global_batch_size=60 .* 8 chips .* multiple of 8 "
                                        r"\(e.g. 56\)"):
        targets.per_chip_batch(60, targets.target("v5e:2x4"))


def test_libtpu_missing_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"libtpu is not installed.*wgan-jax\[tpu\]"):
        targets.require_libtpu()


def _crash() -> int:
    with targets.quiet_native_stderr():
        os.write(2, b"W1125 00:00:00.000000 1 x.cc:1] a warning\n"
                    b"F1125 00:00:00.000000 1 fusion_emitter.cc:45] Check failed: a == b\n")
        os.abort()
    return 0


def test_a_compiler_crash_is_one_line_naming_the_failed_check():
    # libtpu 0.0.42 aborts the process on some v4 programs (docs/tpu-pods.md): the child's
    # parent says which check failed, and the exit status of a child that ends is its own.
    with pytest.raises(UserError, match=r"crashed \(SIGABRT\) compiling for v4:2x2x1: "
                                        r"fusion_emitter.cc:45: Check failed: a == b; "):
        targets.isolated(_crash, targets.target("v4-8"))
    assert targets.isolated(lambda: 3, targets.target("v4-8")) == 3
    assert targets.isolated(lambda: sys.exit(2), targets.target("v4-8")) == 2


# One interpreter compiles every case (libtpu's start and JAX's import once).
CODE = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
from wgan_jax import compile_check, hlo_stats, targets
from wgan_jax.config import apply_overrides, get_config_schema
from wgan_jax.step import make_mesh

out = {}
# A program whose answer is known: a 7-trip loop all-reducing 1000 f32 per trip, one more
# all-reduce of 10 f32 outside it.
t = targets.target("v5e:2x2")
mesh = make_mesh(targets.devices(t))
def body(x):
    def trip(i, c):
        return c + lax.psum(jnp.sin(c) * i, "data")
    y = lax.fori_loop(0, 7, trip, x)
    return y, lax.psum(y[:10], "data")
f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=(P("data"), P())))
x = jax.ShapeDtypeStruct((4000,), np.float32, sharding=NamedSharding(mesh, P("data")))
with targets.quiet_native_stderr():
    text = f.lower(x).compile().as_text()
out["known"] = hlo_stats.allreduce_bytes(text)
out["known_text_has_no_trip_count"] = "known_trip_count" not in text

for name, (topology, overrides) in json.loads(sys.argv[1]).items():
    c = get_config_schema()
    apply_overrides(c, overrides)
    r = compile_check.check(c, targets.target(topology))
    d = r.as_dict()
    d["table"] = compile_check.format_report(r)
    out[name] = d
print(json.dumps(out))
"""

RESNET = {"dataset": "digits", "image_size": 16, "model.kind": "resnet", "model.width": 16,
          "model.z_dim": 16, "global_batch_size": 64, "diagnostics.level": "off"}
CASES = {
    "default_v5e": ("v5e:2x2", {}),
    "resnet_multihost_highest": ("v4:2x2x2", {**RESNET, "matmul_precision": "highest"}),
    "resnet_bf16": ("v5e:2x2", {**RESNET, "compute_dtype": "bfloat16"}),
}


@pytest.fixture(scope="module")
def compiled():
    return run_json(CODE, json.dumps(CASES))


@pytest.mark.slow
@needs_libtpu
def test_loops_are_counted_on_a_tpu_program_whose_answer_is_known(compiled):
    # TPU HLO states no trip count: hlo_stats reads it from the loop (7 trips of 4000 B).
    assert compiled["known_text_has_no_trip_count"]
    assert compiled["known"] == {"bytes": 7 * 4000 + 40, "ops": 8, "unknown_loops": 0}


@pytest.mark.slow
@needs_libtpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles_fits_and_allreduces_one_gradient_per_update(case, compiled):
    r = compiled[case]
    topology = CASES[case][0]
    assert r["topology"] == topology and r["chips"] == (4 if "v5e" in topology else 8)
    assert r["hosts"] == (1 if topology == "v5e:2x2" else 2)
    assert r["per_chip_batch"] * r["chips"] == r["global_batch"]
    step = r["programs"][0]
    assert step["name"] == "train step" and step["batch"] == r["per_chip_batch"]
    assert 0 < step["hbm_bytes"] < r["hbm_per_chip"]
    assert step["memory"]["arguments"] > 0 and step["memory"]["generated_code"] > 0
    # every generator pass the run makes compiles too (pictures at 64, or 1000 toy points)
    assert [p["name"] for p in r["programs"][1:]] == ["generator (pictures)"]
    ar = step["allreduce"]
    assert ar["unknown_loops"] == 0
    # (a little below the minimum where the compiler proves a gradient needs no reduction:
    # 2 of the bfloat16 ResNet critic's 11,813 weights, 40 bytes)
    assert 0.99 * r["allreduce_minimum"] <= ar["bytes"] <= 1.05 * r["allreduce_minimum"], ar
    assert r["flops_per_chip"] > 0 and r["bound"]["iteration"] > 0
    assert r["bound"]["iteration"] == max(r["bound"][k] for k in ("compute", "hbm", "allreduce"))
    # "auto" resolved for the TPU, not this CPU ("matmul")
    assert r["conv_impl"] == "xla"
    assert f"topology {topology}" in r["table"] and "x the minimum" in r["table"]


@pytest.mark.slow
@needs_libtpu
def test_highest_precision_on_every_product_of_the_tpu_program(compiled):
    matmuls = compiled["resnet_multihost_highest"]["programs"][0]["matmuls"]
    assert matmuls and all(key.split()[1] == "highest" for key in matmuls), matmuls


@pytest.mark.slow
@needs_libtpu
def test_default_precision_is_what_the_tpu_program_says(compiled):
    # "default": no product asks for more than the TPU's one bfloat16 pass, and the compiler
    # rounds operands to bfloat16 itself before some of them.
    matmuls = compiled["default_v5e"]["programs"][0]["matmuls"]
    assert all(key.split()[1] == "default" for key in matmuls), matmuls
    assert any(key.split()[2] == "bf16" for key in matmuls), matmuls


@pytest.mark.slow
@needs_libtpu
def test_bfloat16_compute_gives_bfloat16_convolutions(compiled):
    matmuls = compiled["resnet_bf16"]["programs"][0]["matmuls"]
    bf16 = sum(n for key, n in matmuls.items() if key.split()[2] == "bf16")
    assert bf16 >= 0.9 * sum(matmuls.values()), matmuls


@pytest.mark.slow  # the compiler's refusal, then its search for the batch that fits
@needs_libtpu
def test_a_batch_too_large_for_the_chip_is_one_line_with_the_batch_that_fits(tmp_path):
    # The toy MLP: the same refusal and search as any config, on the cheapest programs
    config = os.path.join(REPO, "configs", "toy_8gaussians.py")
    batch = 2**30
    result = run_module(["wgan_jax.compile", "--topology", "v5e:2x2", f"--config={config}",
                         f"--config.global_batch_size={batch}"], cwd=str(tmp_path))
    line = assert_one_error_line(result, ["does not fit", "TPU v5 lite", "GiB",
                                          "largest per-chip batch that fits is about"])
    fits = int(line.split("fits is about ")[1].split()[0])
    assert 8 <= fits < batch // 4
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.slow
@needs_libtpu
@pytest.mark.parametrize("args, words", [
    (["--topology", "v5e:3x3"], ["unknown TPU topology", "v5litepod-16"]),
    (["--topology", "v5e:2x4", "--config.global_batch_size=60"],
     ["global_batch_size=60", "8 chips", "multiple of 8"]),
    ([], ["--topology is required"]),
])
def test_refusals_are_one_line(args, words, tmp_path):
    result = run_module(["wgan_jax.compile", *args], cwd=str(tmp_path))
    assert_one_error_line(result, words)
    assert list(tmp_path.iterdir()) == []
