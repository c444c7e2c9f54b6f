"""The README and the docs hold together: their Python examples run as written, their links
resolve, the README stays a front page, and every shipped config says how to run it.

Only fences opened with ```python are code to run; every one of them, in README.md and
docs/*.md, is run by a test (a marker string names the block and the test that runs it: here,
or tests/test_docs_library.py for docs/library.md). Illustrative snippets use another fence
(```bash, ```text or a bare ```), never one that starts with "py" (tested below).
"""

from __future__ import annotations

import ast
import glob
import os
import re

import pytest
from conftest import REPO
from test_docs_library import MARKERS as LIBRARY_MARKERS
from test_export_cli import MARKERS as EXPORT_MARKERS

README = os.path.join(REPO, "README.md")
# page -> the markers of its Python blocks (one per block; each names the test that runs it)
RUN_BY = {
    "README.md": ("penalties.gp(",),  # test_pure_function_example_gives_the_closed_form
    "docs/library.md": LIBRARY_MARKERS,  # tests/test_docs_library.py
    "docs/export.md": EXPORT_MARKERS,  # tests/test_export_cli.py
}
# every Markdown page whose links are checked
PAGES = ("README.md", "ARCHITECTURE.md", "docs/*.md", "benchmarks/*.md")
README_MAX_BYTES = 12 * 1024


def _read(page: str) -> str:
    with open(os.path.join(REPO, page)) as f:
        return f.read()


def _python_blocks(page: str = "README.md") -> list[str]:
    return re.findall(r"```python\n(.*?)```", _read(page), flags=re.S)


def _pages() -> list[str]:
    found = []
    for pattern in PAGES:
        found += sorted(glob.glob(os.path.join(REPO, pattern)))
    return [os.path.relpath(p, REPO) for p in found]


def test_pure_function_example_gives_the_closed_form():
    (block,) = [b for b in _python_blocks() if "penalties.gp(" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert abs(float(namespace["gp"]) - 16.0) < 1e-4


@pytest.mark.parametrize("page", ["README.md", *sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))])
def test_every_python_block_is_run_by_a_test(page):
    fences = re.findall(r"^```(\S*)", _read(page), flags=re.M)
    assert all(f == "python" or not f.lower().startswith("py") for f in fences), fences
    blocks = _python_blocks(page)
    markers = RUN_BY.get(page, ())
    assert len(blocks) == len(markers), (page, len(blocks), markers)
    for block in blocks:
        assert sum(marker in block for marker in markers) == 1, (page, block[:200])


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces
    to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: str) -> set[str]:
    text = re.sub(r"```.*?```", "", _read(page), flags=re.S)  # no headings inside code
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        slug = _slug(heading)
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _sections_with_a_table(page: str) -> list[str]:
    text = re.sub(r"```.*?```", "", _read(page), flags=re.S)
    sections = re.split(r"^#{1,6} (.+)$", text, flags=re.M)  # [before, h1, body1, h2, ...]
    return [_slug(h) for h, body in zip(sections[1::2], sections[2::2], strict=True)
            if re.search(r"^\|.*\|$", body, flags=re.M)]


def test_slug_is_githubs():
    assert _slug("The relativistic pairing loss with R1 + R2 on the default digits") == (
        "the-relativistic-pairing-loss-with-r1--r2-on-the-default-digits")
    assert _slug("`diagnose` on the shipped collapse run") == "diagnose-on-the-shipped-collapse-run"
    assert _slug("Stacked digits, 1,000 modes") == "stacked-digits-1000-modes"


@pytest.mark.parametrize("page", _pages())
def test_every_relative_link_resolves(page):
    text = re.sub(r"```.*?```", "", _read(page), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    broken = []
    for link in links:
        if re.match(r"[a-z]+:", link):  # http(s), mailto: not checked (no network)
            continue
        path, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(REPO, target)):
            broken.append(f"{link}: no file {target}")
        elif anchor and (not target.endswith(".md") or anchor not in _anchors(target)):
            broken.append(f"{link}: no heading #{anchor} in {target}")
    assert not broken, f"{page}: " + "; ".join(broken)


def test_readme_is_a_front_page_that_links_every_docs_page_and_benchmark_table():
    text = _read("README.md")
    assert len(text.encode()) <= README_MAX_BYTES, len(text.encode())
    for page in glob.glob(os.path.join(REPO, "docs", "*.md")):
        assert f"(docs/{os.path.basename(page)})" in text, page
    # the README links the current table of each benchmark (each section of
    # benchmarks/README.md that holds a table), and the history
    tables = _sections_with_a_table("benchmarks/README.md")
    assert len(tables) >= 10, tables
    for anchor in tables:
        assert f"(benchmarks/README.md#{anchor})" in text, anchor
    assert "(benchmarks/history.md" in text


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "configs", "*.py"))),
                         ids=os.path.basename)
def test_every_config_starts_with_its_command_and_what_it_reaches(path):
    with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read()), clean=False)
    assert doc, path
    name = os.path.basename(path)
    assert f"python -m wgan_jax.main --config configs/{name} " in doc.replace("\n", " "), name
    assert "--workdir" in doc, name
    assert "Reaches:" in doc, name
    # a number it reaches names the benchmark or test behind it; else it says "unmeasured"
    reaches = doc.split("Reaches:", 1)[1]
    assert "unmeasured" in reaches or re.search(r"benchmarks/|tests/", reaches), name
