"""model.conv_impl="auto": one explicit impl per platform (layers.AUTO_IMPLS)."""

from __future__ import annotations

import jax

from wgan_jax.models import layers


def test_auto_maps_each_platform_to_its_measured_impl():
    # cpu: benchmarks/conv_impls.py measured "matmul" fastest (benchmarks/README.md); tpu: the
    # TPU compiler's estimate favours "xla" (benchmarks/tpu_compile.py impls); gpu keeps "s2d"
    # until the benchmark runs there (docs/accelerators.md).
    assert layers.auto_impl("cpu") == "matmul"
    assert layers.auto_impl("gpu") == "s2d"
    assert layers.auto_impl("tpu") == "xla"
    assert layers.auto_impl("some_plugin") == "xla"
    assert set(layers.AUTO_IMPLS.values()) <= set(layers.IMPLS) - {"auto"}


def test_resolve_auto_uses_the_default_backend():
    assert layers.resolve_impl("auto") == layers.auto_impl(jax.default_backend())
    for impl in ("xla", "s2d", "matmul"):
        assert layers.resolve_impl(impl) == impl


def test_auto_resolves_for_the_platform_a_program_is_traced_for():
    """`wgan_jax.portable` traces one generator for several platforms on this machine."""
    with layers.auto_resolved_for("gpu"):
        assert layers.resolve_impl("auto") == "s2d"
        with layers.auto_resolved_for("cpu"):
            assert layers.resolve_impl("auto") == "matmul"
        assert layers.resolve_impl("auto") == "s2d"
        assert layers.resolve_impl("xla") == "xla"
    assert layers.resolve_impl("auto") == layers.auto_impl(jax.default_backend())
