"""Checks the built wheel and sdist in DIST (`python scripts/check_dist.py dist`): one of each,
the wheel's version is `wgan_jax.__version__` (the one place it is written), the wheel carries
what a run needs (every module, the embedded default config, py.typed) and no tests or
benchmarks, and the sdist builds the same package (pyproject.toml, README.md, src/). Prints one
line per archive; exits 1 naming what is wrong."""

from __future__ import annotations

import ast
import pathlib
import sys
import tarfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "wgan_jax"


def _version() -> str:
    for node in ast.parse((PACKAGE / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__version__":
            return ast.literal_eval(node.value)
    raise SystemExit("src/wgan_jax/__init__.py has no __version__")


def main(dist: pathlib.Path) -> list[str]:
    problems = []
    version = _version()
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"{dist}: expected one wheel and one sdist, found {wheels + sdists}"]
    modules = {p.relative_to(PACKAGE.parent).as_posix() for p in PACKAGE.rglob("*.py")}
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"wgan_jax-{version}.dist-info/METADATA").decode() if (
            f"wgan_jax-{version}.dist-info/METADATA" in names) else ""
    if f"\nVersion: {version}\n" not in metadata:
        problems.append(f"{wheels[0].name}: its METADATA does not say Version: {version}")
    for needed in sorted(modules | {"wgan_jax/py.typed", "wgan_jax/default_config.py"}):
        if needed not in names:
            problems.append(f"{wheels[0].name}: lacks {needed}")
    stray = sorted(n for n in names if n.split("/")[0] in ("tests", "benchmarks", "configs"))
    if stray:
        problems.append(f"{wheels[0].name}: carries {stray[:5]}")
    with tarfile.open(sdists[0]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    for needed in ("pyproject.toml", "README.md", "CHANGELOG.md", "src/wgan_jax/py.typed",
                   *(f"src/{m}" for m in sorted(modules))):
        if needed not in members:
            problems.append(f"{sdists[0].name}: lacks {needed}")
    if not problems:
        print(f"{wheels[0].name}: version {version}, {len(modules)} modules, py.typed, "
              f"{wheels[0].stat().st_size // 1024} KiB")
        print(f"{sdists[0].name}: {len(members)} entries, {sdists[0].stat().st_size // 1024} KiB")
    return problems


if __name__ == "__main__":
    found = main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "dist"))
    for problem in found:
        print(f"error: {problem}", file=sys.stderr)
    sys.exit(1 if found else 0)
