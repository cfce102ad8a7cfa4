"""The shape of the house: imports go one way (docs/design.md), and functions stay small.

The import rule is read from the source (every ``import attnkit...``, also
inside functions), so a module that reaches upward fails here whatever the
reason; the negative controls show the checks can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnkit"
MAX_FUNCTION_LINES = 80

# What each part of the package may import from attnkit (besides itself); docs/design.md, "Layers".
BASE = {"_checks", "_lazy", "_finite", "_hf_folder"}
MAY_IMPORT: dict[str, set[str]] = {
    "masks": BASE | {"block_mask"},
    "block_mask": BASE,
    "positional": BASE,
    "score_mods": BASE,
    "tiled_attention": BASE | {"block_mask", "score_mods"},
    "block_runs": BASE | {"block_mask"},
    "block_sparse": BASE | {"masks", "block_mask", "block_runs", "tiled_attention"},
    "functional": BASE | {"masks", "block_mask", "block_sparse"},
    "layers": BASE | {"functional", "masks", "positional"},
    "blocks": BASE | {"layers", "functional", "masks", "positional"},
    "decoding": BASE,
    "models": BASE | {"blocks", "layers", "functional", "masks", "positional", "decoding"},
    "reference": BASE,
    "data": BASE,
    "train": BASE | {"models", "blocks", "layers", "functional", "masks", "positional", "decoding", "data",
                     "reference", "__version__"},
    "viz": BASE,
    "inspect": BASE | {"layers", "functional", "masks", "block_mask", "viz"},
    "bench": BASE | {"functional", "layers", "masks", "score_mods"},
}


def _part(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_parts(source: str) -> set[str]:
    """The parts of attnkit (``masks``, ``train``...) that ``source`` imports, at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "attnkit":
            names = [node.module] if node.module != "attnkit" else [f"attnkit.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "attnkit"]
        found.update(name.split(".")[1] for name in names if "." in name)
    return found


def upward_imports(path: Path) -> set[str]:
    part = _part(path)
    allowed = MAY_IMPORT.get(part)
    if allowed is None:  # cli, the package facade and the console entry may import everything
        return set()
    return imported_parts(path.read_text(encoding="utf-8")) - allowed - {part}


def long_functions(source: str) -> list[tuple[str, int]]:
    return [(node.name, node.end_lineno - node.lineno + 1)  # type: ignore[operator]
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]  # type: ignore[operator]


FILES = sorted(SRC.rglob("*.py"))


def test_imports_only_go_downward() -> None:
    bad = {str(p.relative_to(SRC)): sorted(up) for p in FILES if (up := upward_imports(p))}
    assert not bad, f"modules importing against the layering of docs/design.md: {bad}"


def test_no_function_over_the_limit() -> None:
    long = {str(p.relative_to(SRC)): f for p in FILES if (f := long_functions(p.read_text(encoding="utf-8")))}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


@pytest.mark.parametrize("source, expected", [
    ("from attnkit.train.rundir import committed_dir", {"train"}),
    ("def f():\n    import attnkit.models.bert as b\n", {"models"}),
    ("from attnkit import masks, functional", {"masks", "functional"}),
    ("import numpy\nfrom . import sibling", set()),
])
def test_the_import_reader_sees_every_form(source: str, expected: set[str]) -> None:
    assert imported_parts(source) == expected


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """Negative controls: an upward import in viz and an 81-line function are caught."""
    fake = SRC / "viz" / "upward_example.py"
    assert MAY_IMPORT["viz"] == BASE
    assert imported_parts("from attnkit.models.bert import BertModel") - MAY_IMPORT[_part(fake)] == {"models"}
    body = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    assert long_functions(body) == [("f", MAX_FUNCTION_LINES + 1)]
