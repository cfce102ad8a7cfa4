"""The shape of the house: imports go one way (docs/design.md), no module of attnkit takes part
in an import cycle, no module imports another's private names, and functions stay small.

The import rules are read from the source (every ``import attnkit...``, also
inside functions; only imports under ``if TYPE_CHECKING:``, which never run,
are left out of the cycle check), so a module that reaches upward or round
fails here whatever the reason; the negative controls show the checks can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "attnkit"
MAX_FUNCTION_LINES = 80

# What each part of the package may import from attnkit (besides itself); docs/design.md, "Layers".
# The core is imported by its own paths (attnkit.core....): attnkit.masks, attnkit.functional
# and attnkit.score_mods are the names users import, aliases that only the alias files touch.
BASE = {"_checks", "_lazy", "_finite", "_hf_folder", "_memory", "_modes", "_progress", "_version", "layer_config"}
ALIAS = {"core"}
MAY_IMPORT: dict[str, set[str]] = {
    "core": BASE | {"positional"},
    "positional": BASE,
    "layer_config": {"_checks"},
    "masks": BASE | ALIAS,
    "functional": BASE | ALIAS,
    "score_mods": BASE | ALIAS,
    "layers": BASE | {"core", "positional"},
    "blocks": BASE | {"layers", "core", "positional"},
    "decoding": BASE,
    "models": BASE | {"blocks", "layers", "core", "positional", "decoding"},
    "reference": BASE,
    "data": BASE,
    # integrations: HFClassifier prepares a model on attnkit's Hugging Face backend (check_model)
    "attribution": BASE | {"models", "layers", "core", "data", "viz", "inspect", "integrations"},
    # viz: a finished run's reports and the demo's figures (tasks/classify/reports.py, demo.py)
    "train": BASE | {"models", "blocks", "layers", "core", "positional", "decoding", "data",
                     "reference", "attribution", "viz"},
    "viz": BASE,
    # integrations: the Hugging Face forward's position ids (integrations.positions, torch only)
    "inspect": BASE | {"layers", "core", "viz", "integrations"},
    "bench": BASE | {"core", "layers", "positional"},
    # context parallelism: the core's masks and score mods over torch.distributed, and the
    # layers it runs through the ring (context_parallel); nothing below imports it
    "parallel": BASE | {"core", "positional", "layers"},
    # the server sits at the top, beside cli: it answers with what training left behind
    "serve": BASE | {"train", "attribution", "inspect", "data", "models"},
    # Hugging Face models on attnkit's attention: the core's functions, and its context parallelism
    "integrations": BASE | {"core", "parallel"},
    # the Python API (attnkit.load_run, Predictor) and the scikit-learn style estimator over it
    "api": BASE | {"train"},
    "estimator": BASE | {"api", "train", "data"},
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


# The parts written for Hugging Face transformers (the hf extra): the backend and its context parallelism, capture, the
# server. Below them nothing names the library: attnkit.parallel runs a transformers model only through integrations.
HF_PARTS = {"integrations", "inspect", "serve"}


def imports_transformers(source: str) -> bool:
    """Does ``source`` import the ``transformers`` library (at any depth)?"""
    for node in ast.walk(ast.parse(source)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if any(name.split(".")[0] == "transformers" for name in names):
            return True
    return False


def test_only_the_hf_parts_import_transformers() -> None:
    found = [str(p.relative_to(SRC)) for p in FILES if _part(p) not in HF_PARTS
             and imports_transformers(p.read_text(encoding="utf-8"))]
    assert not found, f"modules outside {sorted(HF_PARTS)} importing transformers: {found}"
    assert imports_transformers("def f():\n    from transformers.masking_utils import X\n")
    assert not imports_transformers("from attnkit.integrations import transformers\nfrom . import transformers\n")


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {_module_name(p): p for p in FILES}


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (imports that never run)."""
    nodes: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return nodes


def imported_modules(source: str, package: str) -> set[str]:
    """The attnkit modules ``source`` imports when it runs, at any depth (inside functions too);
    ``from pkg import mod`` counts as ``pkg.mod``."""
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = node.module if node.level == 0 else ".".join(
                [*package.split(".")[: len(package.split(".")) - node.level + 1], node.module])
            for alias in node.names:
                found.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in MODULES else module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in MODULES}


def private_imports(source: str) -> set[str]:
    """Private names (``_x``) that ``source`` imports from other attnkit modules (modules themselves aside)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "attnkit":
            names.update(a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                         and f"{node.module}.{a.name}" not in MODULES)
    return names


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> the modules it imports), first module repeated at the end."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that reach one another through imports (strongly connected, two or more)."""
    reach = {node: _reachable(graph, node) for node in graph}
    groups: list[set[str]] = []
    for node in sorted(graph):
        group = {other for other in reach[node] if node in reach.get(other, set())}
        if len(group) > 1 and group not in groups:
            groups.append(group)
    return groups


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def lazy_exports(source: str) -> set[str]:
    """The attnkit modules a package ``__init__`` names in strings: the modules its lazy re-exports import."""
    return {node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES}


def import_graph() -> dict[str, set[str]]:
    """Every module of attnkit -> the attnkit modules it imports when it runs (a package's lazy
    re-exports included)."""
    graph = {}
    for name, p in MODULES.items():
        source = p.read_text(encoding="utf-8")
        package = name if p.name == "__init__.py" else name.rpartition(".")[0]
        found = imported_modules(source, package) | (lazy_exports(source) if p.name == "__init__.py" else set())
        graph[name] = found - {name}
    return graph


def test_no_import_cycle_in_the_package() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, f"import cycles (imports inside functions count): {found}; e.g. {_cycle(graph)}"


def test_no_module_imports_another_modules_private_names() -> None:
    found = {str(p.relative_to(SRC)): names for p in FILES
             if (names := private_imports(p.read_text(encoding="utf-8")))}
    assert not found, f"private names imported across modules (make them public, or move them): {found}"


def test_no_function_over_the_limit() -> None:
    long = {str(p.relative_to(SRC)): f for p in FILES if (f := long_functions(p.read_text(encoding="utf-8")))}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


@pytest.mark.parametrize("source, expected", [
    ("from attnkit.train.runs.rundir import committed_dir", {"train"}),
    ("def f():\n    import attnkit.models.bert as b\n", {"models"}),
    ("from attnkit import masks, functional", {"masks", "functional"}),
    ("from attnkit.core.kernels import tiles", {"core"}),
    ("import numpy\nfrom . import sibling", set()),
])
def test_the_import_reader_sees_every_form(source: str, expected: set[str]) -> None:
    assert imported_parts(source) == expected


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """Negative controls: an upward import in viz, a cycle, a private import and an 81-line function are caught."""
    fake = SRC / "viz" / "upward_example.py"
    assert MAY_IMPORT["viz"] == BASE
    assert imported_parts("from attnkit.models.bert import BertModel") - MAY_IMPORT[_part(fake)] == {"models"}
    assert imported_parts("from attnkit import masks") - MAY_IMPORT["layers"] == {"masks"}  # the alias, not the core
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert cycles({"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"d"}}) == [{"a", "b"}]
    assert imported_modules("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                            "    from attnkit.core import dispatch\n", "attnkit") == set()
    assert imported_modules("if TYPE_CHECKING:\n    pass\nelse:\n    from attnkit.core import dispatch\n",
                            "attnkit") == {"attnkit.core.dispatch"}
    assert imported_modules("def f():\n    from attnkit.core import dispatch\n",
                            "attnkit.core.kernels") == {"attnkit.core.dispatch"}
    assert private_imports("from attnkit.core.kernels.runs import _view, usable") == {"_view"}
    assert private_imports("from attnkit import _checks") == set()
    body = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    assert long_functions(body) == [("f", MAX_FUNCTION_LINES + 1)]


def test_lazy_re_exports_count_as_imports() -> None:
    # attnkit's __init__ imports attnkit.api when `attnkit.load_run` is read: a module that imports
    # `from attnkit import ...` would close a cycle through it, and the cycle check must see that.
    assert "attnkit.api" in import_graph()["attnkit"]
    graph = {**import_graph(), "attnkit.train.runs.checkpoint": {"attnkit"}}
    assert cycles(graph), "a module importing the package that lazily re-exports it is a cycle"


# Inside train/: the run folder knows no loop and no task; a task knows no other task (the classifiers
# serve their NumPy backend's runs, which is one task on two backends).
TRAIN_LAYERS = {
    "attnkit.train.runs": ("attnkit.train.loop", "attnkit.train.tasks"),
    "attnkit.train.tasks.translate": ("attnkit.train.tasks.classify", "attnkit.train.tasks.caption",
                                      "attnkit.train.tasks.numpy"),
    "attnkit.train.tasks.caption": ("attnkit.train.tasks.classify", "attnkit.train.tasks.translate",
                                    "attnkit.train.tasks.numpy"),
    "attnkit.train.tasks.numpy": ("attnkit.train.tasks.classify", "attnkit.train.tasks.translate",
                                  "attnkit.train.tasks.caption"),
}


def train_layer_breaks(graph: dict[str, set[str]]) -> list[str]:
    """``"module -> import"`` for each import across :data:`TRAIN_LAYERS`' lines (imports in functions count)."""
    return sorted(f"{name} -> {dep}" for name, deps in graph.items() for folder, banned in TRAIN_LAYERS.items()
                  if name == folder or name.startswith(folder + ".")
                  for dep in deps if any(dep == b or dep.startswith(b + ".") for b in banned))


def test_train_folders_keep_their_layers() -> None:
    assert not train_layer_breaks(import_graph())
    planted = {"attnkit.train.runs.rundir": {"attnkit.train.loop.trainer"},
               "attnkit.train.tasks.caption.captioning": {"attnkit.train.tasks.translate.translation"}}
    assert train_layer_breaks(planted) == ["attnkit.train.runs.rundir -> attnkit.train.loop.trainer",
                                           "attnkit.train.tasks.caption.captioning -> "
                                           "attnkit.train.tasks.translate.translation"]


def _cli_strings(source: str) -> set[str]:
    """Strings of ``source`` that name a module of the command line (``"attnkit.cli.translate:train"``):
    an import written as text, which the import reader cannot see."""
    return {node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and (node.value == "attnkit.cli" or node.value.startswith(("attnkit.cli.", "attnkit.cli:")))}


def test_no_lower_layer_names_the_command_line_in_a_string() -> None:
    found = {str(p.relative_to(SRC)): sorted(names) for p in FILES
             if _part(p) in MAY_IMPORT and (names := _cli_strings(p.read_text(encoding="utf-8")))}
    assert not found, f"modules below the command line naming it in strings: {found}"
    assert _cli_strings('TRAIN = "attnkit.cli.commands:train"\n"""Docs of :mod:`attnkit.cli.translate`."""\n') \
        == {"attnkit.cli.commands:train"}


TASKS = "attnkit.train.tasks"
REGISTRY = "attnkit.train.registry"
"""The one module outside the tasks' folders that names them: it holds the tasks (and loads them when asked)."""


FACES = {
    "attnkit.api": "attnkit.Predictor, the classifier's loader under its public name",
    "attnkit.estimator": "TextClassifier: the text classifier as a scikit-learn estimator",
    "attnkit.serve.models": "ServedModel: a classifier run as the server answers (a Hugging Face classifier too)",
}
"""The modules outside the tasks' folders that are one task's public face by name, and why; nothing else may
import a task (the command line has its own rule, below)."""


def shared_task_imports(graph: dict[str, set[str]]) -> list[str]:
    """``"module -> task module"`` for each module of attnkit outside ``train/tasks/`` (the registry, the
    command line and :data:`FACES` aside) that imports a task: the shared modules (config, the loop, the memory
    checks, the server, the layers below) serve every task and name none."""
    return sorted(f"{name} -> {dep}" for name, deps in graph.items()
                  if not name.startswith((TASKS + ".", "attnkit.cli")) and name not in (REGISTRY, TASKS, *FACES)
                  for dep in deps if dep.startswith(TASKS + "."))


def test_no_shared_module_imports_a_task() -> None:
    assert not shared_task_imports(import_graph())
    planted = {"attnkit.train.config": {"attnkit.train.tasks.classify.objective"},
               "attnkit.serve.app": {"attnkit.train.tasks.translate.served"},
               REGISTRY: {"attnkit.train.tasks.caption.captioning"}, "attnkit.api": {TASKS + ".classify.predictor"}}
    assert shared_task_imports(planted) == ["attnkit.serve.app -> attnkit.train.tasks.translate.served",
                                            "attnkit.train.config -> attnkit.train.tasks.classify.objective"]


def cli_task_names(graph: dict[str, set[str]], sources: dict[str, str]) -> list[str]:
    """``"cli module -> task module"`` for each module of the command line that imports a task, or names one in a
    string (``"attnkit.train.tasks.translate.command:translate_command"``): every command of a task is generated
    from the task's own trees through the registry (:func:`attnkit.cli.train.served_command`), so the command line
    names no task."""
    imports = [f"{name} -> {dep}" for name, deps in graph.items() if name.startswith("attnkit.cli")
               for dep in deps if dep.startswith(TASKS + ".")]
    strings = [f"{name} -> {node.value}" for name, source in sources.items() if name.startswith("attnkit.cli")
               for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Constant)
               and isinstance(node.value, str) and node.value.startswith(TASKS + ".")]
    return sorted(imports + strings)


def test_the_command_line_names_no_task() -> None:
    sources = {name: p.read_text(encoding="utf-8") for name, p in MODULES.items()}
    assert not cli_task_names(import_graph(), sources)
    assert cli_task_names({"attnkit.cli.serve": {"attnkit.train.tasks.classify.predictor", "attnkit.data"}},
                          {"attnkit.cli.x": 'RUN = "attnkit.train.tasks.translate.command:run"\n'}) == \
        ["attnkit.cli.serve -> attnkit.train.tasks.classify.predictor",
         "attnkit.cli.x -> attnkit.train.tasks.translate.command:run"]


def test_the_new_parts_are_covered() -> None:
    """integrations, api and estimator have their rules: an upward import from each is caught."""
    assert imported_parts("from attnkit.train.registry import load_run") - MAY_IMPORT["integrations"] == {"train"}
    assert imported_parts("from attnkit.cli import cli") - MAY_IMPORT["api"] == {"cli"}
    assert imported_parts("from attnkit.serve.app import app") - MAY_IMPORT["estimator"] == {"serve"}
