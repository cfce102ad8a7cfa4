"""Every ```python block of README.md and docs/**/*.md runs as written.

The blocks of one page run in order in one fresh namespace, in a temporary
working directory, so a page may build on its earlier blocks and write files.
A block runs unless its first line is the marker::

    # doc: not run (why: e.g. needs the MR data)

Each block not run is its own skipped test whose reason names the page, the
line and the marker's reason, so the count shows in pytest's summary and
``-rs`` lists why. A marker anywhere but the first line, or without a reason,
is an error: nothing is left out silently. Shell blocks are not run here.

A block followed by a line ``prints`` and a fenced block without a language states its output: what
the block writes to stdout must be that text, line for line, or the test fails showing both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import logging
import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_INFO = {"python", "py", "python3"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
MARKER = re.compile(r"^#\s*doc:\s*not run\b")
MARKER_WITH_REASON = re.compile(r"^#\s*doc:\s*not run\s*\((?P<reason>[^()]*\S[^()]*)\)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced python block: the page, the 1-based line of its first code line, the code."""

    page: str
    line: int
    code: str
    not_run: str | None  # the marker's reason, None when the block runs
    prints: str | None = None  # the output the page states for the block, None when it states none

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


class SnippetMarkerError(ValueError):
    """A ``doc: not run`` marker that is misplaced or gives no reason."""


def extract_blocks(text: str, page: str) -> list[Block]:
    """The python blocks of a Markdown text, in order; indented fences (in lists) count too."""
    blocks: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        words = opening["info"].strip().split()
        language = words[0].lower() if words else ""
        body: list[str] = []
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                break
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        first_line = i - len(body) + 1  # 1-based line of the block's first code line
        i += 1
        if language in PYTHON_INFO:
            block = _block(page, first_line, textwrap.dedent("\n".join(body)))
            blocks.append(dataclasses.replace(block, prints=stated_output(lines, i)))
    return blocks


PRINTS = re.compile(r"^prints:?$")


def stated_output(lines: list[str], after: int) -> str | None:
    """The text of the fenced block without a language that follows line ``after`` past a line ``prints``
    (blank lines around it allowed); None when the page states no output there."""
    rest = [(n, line.strip()) for n, line in enumerate(lines[after:], start=after) if line.strip()]
    if len(rest) < 2 or not PRINTS.match(rest[0][1]):
        return None
    opening = FENCE.match(lines[rest[1][0]])
    if opening is None or opening["info"].strip():
        return None
    body = []
    for line in lines[rest[1][0] + 1:]:
        if line.strip() == opening["fence"]:
            return "\n".join(body)
        body.append(line[len(opening["indent"]):])
    return None


def _block(page: str, line: int, code: str) -> Block:
    lines = code.split("\n")
    for offset, text in enumerate(lines[1:], start=1):
        if MARKER.match(text.strip()):
            raise SnippetMarkerError(
                f"{page}:{line + offset}: a '# doc: not run (...)' marker must be the block's first line")
    not_run = None
    if lines and MARKER.match(lines[0].strip()):
        found = MARKER_WITH_REASON.match(lines[0].strip())
        if found is None:
            raise SnippetMarkerError(
                f"{page}:{line}: the marker needs a reason: '# doc: not run (needs the MR data)'")
        not_run = found["reason"].strip()
    return Block(page, line, code, not_run)


def doc_pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def page_blocks() -> dict[str, list[Block]]:
    found: dict[str, list[Block]] = {}
    for path in doc_pages():
        page = path.relative_to(ROOT).as_posix()
        blocks = extract_blocks(path.read_text(encoding="utf-8"), page)
        if blocks:
            found[page] = blocks
    return found


def run_blocks(blocks: list[Block], namespace: dict[str, object]) -> int:
    """Run the blocks that are not marked, in order, in ``namespace``; returns how many ran.

    Code is compiled under the page's path with its own line numbers, so a
    traceback points at the line of the Markdown page.
    """
    ran = 0
    for block in blocks:
        if block.not_run is not None:
            continue
        code = compile("\n" * (block.line - 1) + block.code, str(ROOT / block.page), "exec")
        output = io.StringIO()
        try:
            with contextlib.redirect_stdout(output) if block.prints is not None else contextlib.nullcontext():
                exec(code, namespace)
        except BaseException as err:
            err.add_note(f"in the python block at {block.where}")
            raise
        if block.prints is not None and output.getvalue().rstrip("\n") != block.prints.rstrip("\n"):
            diff = difflib.unified_diff(block.prints.rstrip("\n").split("\n"),
                                        output.getvalue().rstrip("\n").split("\n"),
                                        "the page says it prints", "it printed", lineterm="")
            raise AssertionError(f"the python block at {block.where} printed other text than the page "
                                 "states:\n" + "\n".join(diff))
        ran += 1
    return ran


PAGES = page_blocks()
NOT_RUN = [b for blocks in PAGES.values() for b in blocks if b.not_run is not None]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A temporary working directory; environment and logger levels restored afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("ATTNKIT_DATA", raising=False)
    environ = dict(os.environ)
    loggers = {name: lg.level for name, lg in logging.root.manager.loggerDict.items()
               if isinstance(lg, logging.Logger)}
    yield tmp_path
    os.environ.clear()
    os.environ.update(environ)
    for name, lg in logging.root.manager.loggerDict.items():
        if isinstance(lg, logging.Logger):
            lg.setLevel(loggers.get(name, logging.NOTSET))


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_snippets_run(page: str, isolated: Path) -> None:
    namespace: dict[str, object] = {"__name__": "__doc_snippet__"}
    ran = run_blocks(PAGES[page], namespace)
    assert ran + sum(b.not_run is not None for b in PAGES[page]) == len(PAGES[page])


# Pages whose blocks are read one at a time (a reader copies one swap): each runs in a fresh namespace.
STANDALONE_PAGES = ["docs/own-model.md"]


@pytest.mark.parametrize("block", [b for page in STANDALONE_PAGES for b in PAGES[page] if b.not_run is None],
                         ids=lambda b: b.where)
def test_standalone_page_blocks_run_alone(block: Block, isolated: Path) -> None:
    assert run_blocks([block], {"__name__": "__doc_snippet__"}) == 1


@pytest.mark.parametrize("block", NOT_RUN or [None], ids=lambda b: b.where if b else "none")
def test_blocks_not_run_are_listed(block: Block | None) -> None:
    """One skipped test per marked block, its reason in pytest's skip summary (-rs)."""
    if block is None:
        return
    pytest.skip(f"{block.where}: python block not run ({block.not_run})")


def test_pages_with_snippets_are_found() -> None:
    assert "README.md" in PAGES, "the README's Quick start block was not found"
    assert "docs/concepts.md" in PAGES and "docs/own-model.md" in PAGES
    assert sum(len(b) for b in PAGES.values()) >= 15
    # so the skip list can be read off one line, too
    print(f"{sum(len(b) for b in PAGES.values())} python blocks on {len(PAGES)} pages; "
          f"{len(NOT_RUN)} not run: " + "; ".join(f"{b.where} ({b.not_run})" for b in NOT_RUN))


# --- the extractor and the runner, on pages written here (negative controls) ---------------------

SAMPLE = """# Title

```python
x = 1
```

```bash
echo not python
```

- a list item:

    ```python
    y = x + 1
    ```

~~~python
# doc: not run (needs a GPU)
raise RuntimeError("never runs")
~~~

```pycon
>>> not collected
```
"""


def test_extractor_finds_python_blocks_with_lines() -> None:
    blocks = extract_blocks(SAMPLE, "sample.md")
    assert [(b.line, b.code.strip(), b.not_run) for b in blocks[:2]] == [(4, "x = 1", None), (14, "y = x + 1", None)]
    assert blocks[2].not_run == "needs a GPU" and blocks[2].line == 18
    assert len(blocks) == 3


def test_runner_runs_in_order_and_skips_only_marked(tmp_path: Path) -> None:
    namespace: dict[str, object] = {}
    assert run_blocks(extract_blocks(SAMPLE, "sample.md"), namespace) == 2
    assert namespace["y"] == 2


def test_failing_block_names_page_and_line() -> None:
    text = "intro\n\n```python\na = 1\nb = undefined_name\n```\n"
    with pytest.raises(NameError) as info:
        run_blocks(extract_blocks(text, "README.md"), {})
    assert "in the python block at README.md:4" in info.value.__notes__
    assert info.traceback[-1].lineno + 1 == 5  # the page's own line number


@pytest.mark.parametrize("text, message", [
    ("```python\nx = 1\n# doc: not run (too late)\n```\n", "must be the block's first line"),
    ("```python\n# doc: not run\nx = 1\n```\n", "needs a reason"),
    ("```python\n# doc: not run ()\nx = 1\n```\n", "needs a reason"),
])
def test_bad_markers_are_errors(text: str, message: str) -> None:
    with pytest.raises(SnippetMarkerError, match=re.escape(message)):
        extract_blocks(text, "page.md")


PRINTING = """Text.

```python
print("one")
print("two")
```

prints

```
one
two
```
"""


def test_a_stated_output_is_read_and_compared() -> None:
    blocks = extract_blocks(PRINTING, "p.md")
    assert [b.prints for b in blocks] == ["one\ntwo"]
    assert run_blocks(blocks, {}) == 1
    with pytest.raises(AssertionError, match=r"printed other text than the page states(.|\n)*\+three"):
        run_blocks(extract_blocks(PRINTING.replace('print("two")', 'print("three")'), "p.md"), {})
    assert extract_blocks(PRINTING.replace("prints", "and then"), "p.md")[0].prints is None
