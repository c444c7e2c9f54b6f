"""Counts what a compiled step communicates, from its optimized HLO text.

Used by the communication test and the speed benchmark: the bytes all-reduced per call,
with all-reduces inside `while` loops (the critic `lax.scan`) multiplied by the loop's known
trip count.
"""

from __future__ import annotations

import re
from collections import defaultdict

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
          "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8}
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$")
_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16)\[([\d,]*)\]")
_CALLEE = re.compile(r"\b(body|condition|to_apply|calls)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'known_trip_count":\{"n":"(\d+)"')
_ALL_REDUCE = re.compile(r"=\s*(.*?)\s+all-reduce(?:-start)?\(")


def _shape_bytes(type_text: str) -> int:
    total = 0
    for dtype, dims in _SHAPE.findall(type_text):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * _BYTES.get(dtype, 4)
    return total


def allreduce_bytes(hlo_text: str) -> dict[str, int]:
    """{"bytes": total per call, "ops": all-reduces executed per call} of an HLO module."""
    bodies: dict[str, list[str]] = {}
    entry, current = None, None
    for line in hlo_text.splitlines():
        header = _HEADER.match(line)
        if header:
            current = header.group(2)
            bodies[current] = []
            if header.group(1):
                entry = current
        elif current is not None:
            bodies[current].append(line)
    edges: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for name, lines in bodies.items():
        for line in lines:
            trip = _TRIP.search(line)
            for kind, callee in _CALLEE.findall(line):
                factor = int(trip.group(1)) if kind == "body" and trip else 1
                edges[name].append((callee, factor))
            for group in _BRANCHES.findall(line):
                for callee in group.split(","):
                    edges[name].append((callee.strip().lstrip("%"), 1))
    multiplier: dict[str, int] = defaultdict(int)
    stack = [(entry, 1)] if entry else []
    while stack:
        name, factor = stack.pop()
        multiplier[name] += factor
        for callee, f in edges.get(name, ()):
            stack.append((callee, factor * f))
    total = ops = 0
    for name, lines in bodies.items():
        for line in lines:
            match = _ALL_REDUCE.search(line)
            if match and multiplier[name]:
                total += _shape_bytes(match.group(1)) * multiplier[name]
                ops += multiplier[name]
    return {"bytes": total, "ops": ops}
