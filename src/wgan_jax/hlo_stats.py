"""Counts what a compiled program does, from its optimized HLO text (CPU, GPU and TPU).

Used by the communication test, the speed benchmark and the TPU compile check
(`wgan_jax.compile_check`):

* `allreduce_bytes`: the bytes all-reduced per call, each all-reduce inside a `while` loop (the
  critic `lax.scan`) multiplied by the loop's trip count;
* `matmul_ops`: the dots and convolutions, by the precision they carry and the type of their
  operands (what a TPU computes float32 products at);
* `estimated_cycles`: the TPU compiler's own cycle estimates of its fusions, summed per call.

A loop's trip count is XLA's `known_trip_count` where the compiler states it (CPU, GPU); TPU
programs do not, so there it is read from the loop itself: a condition `i < N` on a counter
that starts at a constant and a body that adds 1 to it. A loop neither way gives is counted
once and reported in `unknown_loops`, never guessed.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

__all__ = ["allreduce_bytes", "matmul_ops", "estimated_cycles", "parse"]

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
          "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8}
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$")
_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16)\[([\d,]*)\]")
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+([a-z][\w\-]*)\((.*)$")
_CALLEE = re.compile(r"\b(body|condition|to_apply|calls)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'known_trip_count":\{"n":"(\d+)"')
_OPERAND = re.compile(r"%([\w.\-]+)")
_CONSTANT = re.compile(r"^constant\((-?\d+)\)")
_INDEX = re.compile(r"\bindex=(\d+)")
_PRECISION = re.compile(r"operand_precision=\{(\w+),")
_CYCLES = re.compile(r'"estimated_cycles":"(\d+)"')
_PASS_THROUGH = ("copy", "bitcast", "convert", "copy-start", "copy-done")


@dataclass
class _Instruction:
    name: str
    type: str
    opcode: str
    rest: str
    root: bool

    @property
    def operands(self) -> list[str]:
        head = self.rest.split("),", 1)[0] if ")," in self.rest else self.rest.rsplit(")", 1)[0]
        return _OPERAND.findall(head)


@dataclass
class Module:
    """An HLO module: its computations' instructions, the entry, and how often each
    computation runs per call of the entry (`multiplier`)."""

    computations: dict[str, list[_Instruction]]
    entry: str | None
    multiplier: dict[str, int] = field(default_factory=dict)
    unknown_loops: int = 0


def _parse_computations(hlo_text: str) -> tuple[dict[str, list[_Instruction]], str | None]:
    computations: dict[str, list[_Instruction]] = {}
    entry, current = None, None
    for line in hlo_text.splitlines():
        header = _HEADER.match(line)
        if header:
            current = header.group(2)
            computations[current] = []
            if header.group(1):
                entry = current
            continue
        if current is None:
            continue
        match = _INSTRUCTION.match(line)
        if match:
            root, name, type_text, opcode, rest = match.groups()
            computations[current].append(_Instruction(name, type_text, opcode, rest, bool(root)))
    return computations, entry


def _constant(name: str, by_name: dict[str, _Instruction]) -> int | None:
    """The integer constant `name` holds, through copies and conversions; None if not one."""
    for _ in range(16):
        inst = by_name.get(name)
        if inst is None:
            return None
        if inst.opcode == "constant":
            found = _CONSTANT.match(f"constant({inst.rest}")
            return int(found.group(1)) if found else None
        if inst.opcode not in _PASS_THROUGH or not inst.operands:
            return None
        name = inst.operands[0]
    return None


def _trip_count(loop: _Instruction, caller: dict[str, _Instruction],
                computations: dict[str, list[_Instruction]]) -> int | None:
    """The trip count of `while` instruction `loop`: XLA's known_trip_count, else
    `for (i = K; i < N; i += 1)` read from its init tuple, condition and body."""
    known = _TRIP.search(loop.rest)
    if known:
        return int(known.group(1))
    callees = dict((kind, name) for kind, name in _CALLEE.findall(loop.rest))
    condition = computations.get(callees.get("condition", ""), [])
    body = computations.get(callees.get("body", ""), [])
    cond_by_name = {i.name: i for i in condition}
    root = next((i for i in condition if i.root), None)
    if root is None or root.opcode != "compare" or "direction=LT" not in root.rest:
        return None
    counter, bound = (root.operands + [None, None])[:2]
    limit = _constant(bound, cond_by_name) if bound else None
    element = cond_by_name.get(counter or "")
    if limit is None or element is None or element.opcode != "get-tuple-element":
        return None
    index = int(_INDEX.search(element.rest).group(1))  # type: ignore[union-attr]
    init_tuple = caller.get(loop.operands[0]) if loop.operands else None
    if init_tuple is None or init_tuple.opcode != "tuple" or index >= len(init_tuple.operands):
        return None
    start = _constant(init_tuple.operands[index], caller)
    body_by_name = {i.name: i for i in body}
    body_root = next((i for i in body if i.root), None)
    if start is None or body_root is None or body_root.opcode != "tuple":
        return None
    increment = body_by_name.get(body_root.operands[index])
    if increment is None or increment.opcode != "add":
        return None
    if 1 not in [_constant(o, body_by_name) for o in increment.operands]:
        return None
    return max(limit - start, 0)


def parse(hlo_text: str) -> Module:
    """The module of `hlo_text` with each computation's runs per call of the entry."""
    computations, entry = _parse_computations(hlo_text)
    module = Module(computations, entry)
    edges: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for name, instructions in computations.items():
        by_name = {i.name: i for i in instructions}
        for inst in instructions:
            factor = 1
            if inst.opcode == "while":
                trip = _trip_count(inst, by_name, computations)
                if trip is None:
                    module.unknown_loops += 1
                factor = 1 if trip is None else trip
            for kind, callee in _CALLEE.findall(inst.rest):
                edges[name].append((callee, factor if kind == "body" else 1))
            for group in _BRANCHES.findall(inst.rest):
                for callee in group.split(","):
                    edges[name].append((callee.strip().lstrip("%"), 1))
    multiplier: dict[str, int] = defaultdict(int)
    stack = [(entry, 1)] if entry else []
    while stack:
        name, factor = stack.pop()
        multiplier[name] += factor
        for callee, f in edges.get(name, ()):
            stack.append((callee, factor * f))
    module.multiplier = multiplier
    return module


def _shape_bytes(type_text: str) -> int:
    total = 0
    for dtype, dims in _SHAPE.findall(type_text):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * _BYTES.get(dtype, 4)
    return total


def allreduce_bytes(hlo_text: str | Module) -> dict[str, int]:
    """{"bytes": total per call, "ops": all-reduces executed per call, "unknown_loops": loops
    whose trip count could not be read (counted once)} of an HLO module. An asynchronous
    all-reduce counts once (its start)."""
    module = parse(hlo_text) if isinstance(hlo_text, str) else hlo_text
    total = ops = 0
    for name, instructions in module.computations.items():
        runs = module.multiplier.get(name, 0)
        for inst in instructions:
            if runs and inst.opcode in ("all-reduce", "all-reduce-start"):
                total += _shape_bytes(inst.type) * runs
                ops += runs
    return {"bytes": total, "ops": ops, "unknown_loops": module.unknown_loops}


def matmul_ops(hlo_text: str | Module) -> Counter[tuple[str, str, str]]:
    """How many dots and convolutions the program holds (each once, loops not multiplied), by
    (opcode, operand precision, type of the first operand): ("convolution", "highest",
    "f32"), ... A TPU compiles dots to convolutions too; "default" is an op that names no
    precision. The first operand's type is read where it is defined in the same computation
    ("?" otherwise)."""
    module = parse(hlo_text) if isinstance(hlo_text, str) else hlo_text
    found: Counter[tuple[str, str, str]] = Counter()
    for instructions in module.computations.values():
        by_name = {i.name: i for i in instructions}
        for inst in instructions:
            if inst.opcode not in ("dot", "convolution"):
                continue
            precision = _PRECISION.search(inst.rest)
            operand = by_name.get(inst.operands[0]) if inst.operands else None
            dtype = _SHAPE.search(operand.type) if operand is not None else None
            found[(inst.opcode, precision.group(1) if precision else "default",
                   dtype.group(1) if dtype else "?")] += 1
    return found


def estimated_cycles(hlo_text: str | Module) -> int:
    """The TPU compiler's estimated cycles of one call: the `estimated_cycles` it writes on
    each fusion, times the runs of the computation holding it (0 where it writes none)."""
    module = parse(hlo_text) if isinstance(hlo_text, str) else hlo_text
    total = 0
    for name, instructions in module.computations.items():
        runs = module.multiplier.get(name, 0)
        for inst in instructions:
            cycles = _CYCLES.search(inst.rest)
            if runs and cycles:
                total += int(cycles.group(1)) * runs
    return total
