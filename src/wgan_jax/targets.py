"""TPU slices a run can be compiled for without owning them: names, chips, published figures.

`target(name)` reads a slice's name in either of Cloud TPU's forms, the topology
(``v5e:4x4``, ``v4:2x2x4``) or the accelerator type (``v5litepod-16``, ``v4-32``, ``v5p-128``,
``v6e-256``), and `devices(target)` asks libtpu (JAX's ``tpu`` extra) for that slice's
compile-only devices: `jit(...).lower(...).compile()` over a mesh of them runs XLA's TPU
compiler on this machine (`wgan_jax.compile_check`).

Each chip's figures (`CHIPS`) are the published ones, named with their source; they bound an
iteration's time from below (`compile_check.time_bound`), they do not measure it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import importlib.metadata
import importlib.util
import os
import re
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from wgan_jax.errors import UserError

__all__ = ["Chip", "Target", "CHIPS", "target", "devices", "require_libtpu", "ACCEPTED_FORMS",
           "quiet_native_stderr", "isolated", "per_chip_batch"]


@dataclass(frozen=True)
class Chip:
    """One TPU chip generation's published figures (per chip; `source` names the page)."""

    generation: str  # v4, v5e, v5p, v6e
    device_kind: str  # as JAX names it
    hbm_bytes: int
    peak_bf16_flops: float  # per second, bfloat16 matrix units
    hbm_bytes_per_second: float
    ici_bytes_per_second: float  # all of a chip's inter-chip links together
    dims: int  # 2 (v5e, v6e: a 2-D torus) or 3 (v4, v5p)
    cores_in_name: bool  # accelerator types count TensorCores (v4-8: 4 chips), not chips
    megacore: bool  # JAX sees one device per chip, its 2 TensorCores fused
    source: str


GIB = 1 << 30

#: The chips libtpu compiles for here, with the figures of Cloud TPU's system-architecture
#: pages (HBM capacity and bandwidth, peak bfloat16 FLOP/s, inter-chip interconnect bandwidth).
CHIPS: dict[str, Chip] = {
    "v4": Chip("v4", "TPU v4", 32 * GIB, 275e12, 1200e9, 2400e9 / 8, 3, True, True,
               "cloud.google.com/tpu/docs/v4"),
    "v5e": Chip("v5e", "TPU v5 lite", 16 * GIB, 197e12, 819e9, 1600e9 / 8, 2, False, False,
                "cloud.google.com/tpu/docs/v5e"),
    "v5p": Chip("v5p", "TPU v5", 95 * GIB, 459e12, 2765e9, 4800e9 / 8, 3, True, True,
                "cloud.google.com/tpu/docs/v5p"),
    "v6e": Chip("v6e", "TPU v6 lite", 32 * GIB, 918e12, 1640e9, 3584e9 / 8, 2, False, False,
                "cloud.google.com/tpu/docs/v6e"),
}
_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e", "v6lite": "v6e"}
# The slice shapes Cloud TPU sells, by chip count (2-D and 3-D tori).
_SHAPES_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8),
              128: (8, 16), 256: (16, 16)}
_SHAPES_3D = {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4),
              128: (4, 4, 8), 256: (4, 8, 8), 512: (8, 8, 8), 1024: (8, 8, 16),
              2048: (8, 16, 16), 4096: (16, 16, 16)}

#: What `target` accepts, for its refusal.
ACCEPTED_FORMS = ("a topology GEN:AxB (v5e, v6e) or GEN:AxBxC (v4, v5p), e.g. v5e:4x4, "
                  "v4:2x2x4; or an accelerator type, e.g. v4-8, v4-32, v5litepod-16, v5e-256, "
                  "v5p-128, v6e-256")


@dataclass(frozen=True)
class Target:
    """A TPU slice: its chip, its chips' grid, and how many hosts hold them."""

    name: str  # as the user gave it
    chip: Chip
    shape: tuple[int, ...]
    chips_per_host: tuple[int, ...]

    @property
    def chips(self) -> int:
        """Chips in the slice (JAX devices: one per chip, megacore included)."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def hosts(self) -> int:
        """TPU VM hosts (processes of a run) holding the slice's chips."""
        per_host = 1
        for d in self.chips_per_host:
            per_host *= d
        return max(self.chips // per_host, 1)

    @property
    def topology(self) -> str:
        """libtpu's name: ``v5e:4x4``."""
        return f"{self.chip.generation}:{'x'.join(map(str, self.shape))}"


def _unknown(name: str) -> UserError:
    return UserError(f"unknown TPU topology {name!r}: give {ACCEPTED_FORMS}")


def _chips_per_host(chip: Chip, shape: tuple[int, ...]) -> tuple[int, ...]:
    if chip.dims == 3:
        return tuple(min(s, b) for s, b in zip(shape, (2, 2, 1), strict=True))
    chips = shape[0] * shape[1]
    # v5e and v6e: slices of up to 8 chips are one host; larger ones 4 chips (2x2) per host.
    return shape if chips <= 8 else (2, 2)


def target(name: str) -> Target:
    """The slice `name` names (`ACCEPTED_FORMS`); `UserError` in one line otherwise."""
    text = name.strip().lower()
    topology = re.fullmatch(r"([a-z0-9]+):(\d+(?:x\d+)+)", text)
    accelerator = re.fullmatch(r"([a-z0-9]+)-(\d+)", text)
    if topology:
        generation = _ALIASES.get(topology.group(1), topology.group(1))
        chip = CHIPS.get(generation)
        shape = tuple(int(d) for d in topology.group(2).split("x"))
        sold = (_SHAPES_3D if chip and chip.dims == 3 else _SHAPES_2D).values()
        if chip is None or sorted(shape) not in [sorted(s) for s in sold]:
            raise _unknown(name)
    elif accelerator:
        generation = _ALIASES.get(accelerator.group(1), accelerator.group(1))
        chip = CHIPS.get(generation)
        if chip is None:
            raise _unknown(name)
        count = int(accelerator.group(2))
        chips = count // 2 if chip.cores_in_name else count
        table = _SHAPES_3D if chip.dims == 3 else _SHAPES_2D
        if (chip.cores_in_name and count % 2) or chips not in table:
            raise _unknown(name)
        shape = table[chips]
    else:
        raise _unknown(name)
    return Target(name, chip, shape, _chips_per_host(chip, shape))


def per_chip_batch(global_batch: int, t: Target) -> int:
    """A global batch's share of one chip of `t`; `UserError` in one line when it does not
    split over the chips."""
    if global_batch % t.chips:
        raise UserError(f"config.global_batch_size={global_batch} does not split over the "
                        f"{t.chips} chips of {t.name}: use a multiple of {t.chips} (e.g. "
                        f"{t.chips * max(global_batch // t.chips, 1)})")
    return global_batch // t.chips


def require_libtpu() -> None:
    """`UserError` in one line when libtpu (the TPU compiler) is not installed."""
    if importlib.util.find_spec("libtpu") is None:
        raise UserError("libtpu is not installed, and it holds the TPU compiler: "
                        "pip install 'wgan-jax[tpu]' (JAX's tpu extra)")


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Inside, what is written to file descriptor 2 (libtpu's C++ messages: its warnings of
    no TPU_WORKER_HOSTNAMES and no accelerator type, true and harmless for a compile-only
    client, and its fatal check failures) goes to the file `isolated` names, else nowhere."""
    if os.environ.get("WGAN_JAX_VERBOSE"):
        yield
        return
    saved = os.dup(2)
    try:
        with open(os.environ.get(_NATIVE_LOG) or os.devnull, "a") as sink:
            os.dup2(sink.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@functools.cache
def devices(t: Target) -> list[Any]:
    """The compile-only devices of slice `t` (one per chip), in libtpu's order; asked of
    libtpu once per slice (a check compiles several programs for it)."""
    require_libtpu()
    from jax.experimental import topologies

    # libtpu lets one process hold a machine's TPUs (a lock file in /tmp); a compile-only
    # client holds none, so it may share the machine with a trainer or another compile.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    with quiet_native_stderr():
        wrap = tuple(d >= 16 or (t.chip.dims == 3 and d >= 4 and d % 4 == 0) for d in t.shape)
        description = topologies.get_topology_desc(
            topology_name=t.topology, platform="tpu",
            chip_config_name="megacore" if t.chip.megacore else "default",
            chips_per_host_bounds=t.chips_per_host + (1,) * (3 - len(t.chips_per_host)),
            num_slices=1, wrap=wrap + (False,) * (3 - len(wrap)))
    found = list(description.devices)
    if len(found) != t.chips:
        raise UserError(f"libtpu gives {len(found)} devices for {t.topology}, expected "
                        f"{t.chips} chips")
    return found


_NATIVE_LOG = "WGAN_JAX_NATIVE_LOG"
# libtpu's fatal line ("F1125 12:00:00.0 123 file.cc:45] Check failed: ..."): its message.
_FATAL = re.compile(r"^F\d{4} [\d:.]+\s+\d+ (\S+\] .*)", re.MULTILINE)


def isolated(body: Callable[[], int], t: Target) -> int:
    """`body()`'s exit status, run in a child process: libtpu stops the process on an internal
    check failure (SIGABRT, a C++ stack), which the child's parent turns into a `UserError`
    in one line naming the failed check. Call it before JAX has started a backend."""
    fd, log = tempfile.mkstemp(prefix="wgan_jax_libtpu_", suffix=".log")
    os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        os.environ[_NATIVE_LOG] = log
        faulthandler.disable()  # a crash's Python stack would bypass the log
        status = 1
        try:
            status = int(body() or 0)
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
        except BaseException:  # noqa: BLE001 - a bug: its traceback, then the status
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    try:
        _, wait_status = os.waitpid(pid, 0)
        if not os.WIFSIGNALED(wait_status):
            return os.waitstatus_to_exitcode(wait_status)
        with open(log, errors="replace") as f:
            found = [m.replace("] ", ": ", 1) for m in _FATAL.findall(f.read())]
    finally:
        os.remove(log)
    try:
        version = f"libtpu {importlib.metadata.version('libtpu')}"
    except importlib.metadata.PackageNotFoundError:
        version = "libtpu"
    name = signal.Signals(os.WTERMSIG(wait_status)).name
    raise UserError(
        f"the TPU compiler ({version}) crashed ({name}) compiling for {t.topology}: "
        f"{found[0].strip() if found else 'no message'}; the same libtpu would on the slice: try "
        "another global_batch_size or another jax[tpu] version")

