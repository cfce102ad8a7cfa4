"""docs/derivations.md quotes the NumPy twin line by line: every quoted line is in the function it names.

Each table of the page has the columns ``equation | NumPy line | in``; the
``in`` cell names a file under ``src/attnkit/`` and a function
(``reference/layers.py``, ``LayerNorm.backward``). A quoted line that is no
longer in that function's source fails here, so the page cannot drift from
the code it explains.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "derivations.md"
CODE = re.compile(r"`([^`]+)`")


def quoted_rows() -> list[tuple[str, list[str], str, str]]:
    """``(equation, quoted lines, file, function)`` for every row of the page's ``NumPy line`` tables."""
    rows, in_table = [], False
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")] if line.startswith("|") else []
        if cells == ["equation", "NumPy line", "in"]:
            in_table = True
        elif not cells:
            in_table = False
        elif in_table and not set(line) <= set("|- "):
            equation, numpy_line, where = cells
            path, function = where.split(", ")
            rows.append((equation, CODE.findall(numpy_line), CODE.findall(path)[0], CODE.findall(function)[0]))
    return rows


def function_lines(path: Path, qualname: str) -> set[str]:
    """The stripped source lines of function ``qualname`` (``name`` or ``Class.method``) of ``path``."""
    source = path.read_text(encoding="utf-8")
    scope: list[ast.stmt] = ast.parse(source).body
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        assert node is not None, f"{path.name} has no {qualname}"
        scope = node.body  # type: ignore[attr-defined]
    segment = ast.get_source_segment(source, node)  # type: ignore[arg-type]
    assert segment is not None
    return {line.strip() for line in segment.splitlines()}


ROWS = quoted_rows()


def test_the_page_quotes_every_backward() -> None:
    functions = {(path, function) for _, _, path, function in ROWS}
    assert len(ROWS) >= 25, f"expected the derivation tables of {PAGE.name}, found {len(ROWS)} rows"
    for wanted in (("reference/functional.py", "softmax_backward"), ("reference/attention.py", "attention_backward"),
                   ("reference/layers.py", "LayerNorm.backward"), ("reference/chunked.py", "_forward_head"),
                   ("reference/chunked.py", "chunked_attention_backward")):
        assert wanted in functions, f"{PAGE.name} quotes nothing of {wanted}"


@pytest.mark.parametrize(("equation", "quoted", "path", "function"), ROWS, ids=[r[0] for r in ROWS])
def test_each_quoted_line_is_in_the_code(equation: str, quoted: list[str], path: str, function: str) -> None:
    lines = function_lines(ROOT / "src" / "attnkit" / path, function)
    assert quoted, f"the row {equation!r} quotes no line"
    for line in quoted:
        assert line in lines, f"{PAGE.name}, row {equation!r}: {line!r} is not a line of {path}::{function}"
