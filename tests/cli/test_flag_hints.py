"""Every message that suggests a flag names one that exists, on the command that says it.

The messages are collected from the source (every string and f-string literal
of ``src/attnkit`` that names a ``--flag`` and reads as a sentence; docstrings,
option declarations and help texts are not messages), so a new message is
checked without being listed here. The flags are read off the command line's
parser (click's options of each command, the ``train --task`` commands
included). Three rules:

1. a flag a message names exists on some attnkit command (a typo, or a flag
   since renamed, is caught wherever it is said);
2. a message that names the command (``attnkit train --out X --resume``) names
   that command's flags;
3. a message written in a command's own module names flags of that command
   (inside the command's function), or of a command defined in that module or
   in one that imports it (a helper); flags after a named command are rule 2's;
4. a message of the library code that commands share -- the data readers
   (``attnkit.data``), the training code (``attnkit.train``) and the finite-step
   policy (``attnkit._finite``) -- names flags of every command that can reach
   it: the commands are followed through what their code refers to (functions,
   classes and constants, across modules), so ``predict --file``, which reads a
   CSV's text column, has every flag that reader's messages name, and a training
   message that ``demo`` reaches names none of the flags ``demo`` lacks. Such code
   names a setting by its Python name (``max_memory``, ``on_nan``), or takes the
   flag from its caller (``encoding_hint(flag=...)``, ``check_bert_folder(what=...)``).
   ``report`` reads a run's data again with the run's own reader settings, and only the bytes the run
   was trained on (their SHA-256 is checked first): the same bytes read the same way cannot meet a
   reader's refusal that the training did not, so the readers' messages are not held to its flags.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

import attnkit
from attnkit.cli import LAZY_COMMANDS, cli, train_tasks
from attnkit.cli.train import task_commands
from attnkit.train.registry import tasks

SRC = Path(attnkit.__file__).resolve().parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# "attnkit CMD" or "attnkit train --task TASK", then the rest of the message
NAMED = re.compile(r"\battnkit (train --task (?:translate|caption)|[a-z]+)\b([^;:()]*)")
# Flags of other programs that messages may name, with the program.
FOREIGN = {"--force-reinstall": "pip", "--as": "prlimit"}
# cli modules shared by several commands: rule 3 does not apply (rules 1 and 2 do)
SHARED_CLI = {"cli/options.py", "cli/messages.py", "cli/__init__.py"}
# commands that read a run's own data again, checked by its SHA-256, with the run's reader settings
REREADS = {"report"}


@dataclass(frozen=True)
class Message:
    module: str  # path under src/attnkit
    line: int
    function: str | None  # the enclosing top-level function
    text: str  # f-string fields as {}

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.text!r}"


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _not_messages(tree: ast.AST) -> set[int]:
    """Nodes that are no message: docstrings and bare strings, option declarations, help texts, the
    arguments of another program (``subprocess.run([...])``)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))  # a docstring, or the docstring of an assignment
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and (node.func.attr in ("option", "argument")
                     or isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"):
            skip.update(id(n) for n in ast.walk(node))
        elif isinstance(node, ast.keyword) and node.arg == "help":
            skip.update(id(n) for n in ast.walk(node.value))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)  # the parts of an f-string: read as one
    return skip


def collect_messages(src: Path = SRC) -> list[Message]:
    found = []
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _not_messages(tree)
        owner = {id(n): top.name for top in tree.body if isinstance(top, ast.FunctionDef) for n in ast.walk(top)}
        for node in ast.walk(tree):
            text = None if id(node) in skip else _text(node)
            if text and FLAG.search(text) and " " in text.strip():
                found.append(Message(path.relative_to(src).as_posix(), node.lineno, owner.get(id(node)), text))
    return found


def _flags(command: click.Command) -> set[str]:
    ctx = click.Context(command)
    return {opt for p in command.get_params(ctx) for opt in (*p.opts, *p.secondary_opts) if opt.startswith("--")}


def commands() -> dict[str, click.Command]:
    """Every command by the name a user types: ``train``, ``visualize``, ``train --task translate``..."""
    ctx = click.Context(cli)
    found = {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}
    for task, command in train_tasks().items():
        if not tasks()[task].default:  # its command is `attnkit train`
            found[f"train --task {task}"] = command
    assert set(LAZY_COMMANDS) <= set(found)
    return {name: command for name, command in found.items() if command is not None}


COMMANDS = commands()
FLAGS = {name: _flags(command) | _flags(cli) for name, command in COMMANDS.items()}
ALL_FLAGS = set().union(*FLAGS.values())
MESSAGES = collect_messages()


def _module_commands(module: str) -> dict[str, set[str]]:
    """The commands defined in ``module`` (a cli module), by their callback's function name."""
    name = "attnkit." + module.removesuffix(".py").replace("/", ".")
    return {command.callback.__name__: FLAGS[user_name] for user_name, command in COMMANDS.items()
            if command.callback is not None and command.callback.__module__ == name}


def _importers(module: str) -> list[str]:
    """The cli modules that import ``module`` (a cli module), anywhere in their code."""
    name = "attnkit." + module.removesuffix(".py").replace("/", ".")
    found = []
    for path in sorted((SRC / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == name:
                found.append(path.relative_to(SRC).as_posix())
                break
    return found


# --- rule 4: which commands reach a message -----------------------------------------------------------

# modules whose messages name flags of every command that reaches them
READER_MODULES = ("data/", "train/", "_finite.py")


def _qualified(path: Path) -> str:
    return "attnkit." + path.relative_to(SRC).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")


def _top_names(statement: ast.stmt) -> list[str]:
    """The names a module-level statement defines (a function, a class, a constant)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [statement.name]
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def _reference_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Each module-level name of attnkit (``attnkit.data.readers.read_texts``) -> the attnkit names its
    code refers to: names defined in its module, names imported from attnkit (at any depth of the module)
    and ``module.name`` of an imported attnkit module. A reference need not be a call (a callback, a
    constant, a class whose methods then count) and a method called on an instance is reached through
    its class, so the graph errs on the side of reaching."""
    graph: dict[str, set[str]] = {}
    for path in sorted(src.rglob("*.py")):
        module, tree = _qualified(path), ast.parse(path.read_text(encoding="utf-8"))
        names = {name: f"{module}.{name}" for statement in tree.body for name in _top_names(statement)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnkit") and not node.level:
                names.update({(a.asname or a.name): f"{node.module}.{a.name}" for a in node.names})
            elif isinstance(node, ast.Import):
                names.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("attnkit")})
        for statement in tree.body:
            refs = set()
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and node.id in names:
                    refs.add(names[node.id])
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
                    refs.add(f"{names[node.value.id]}.{node.attr}")
            for name in _top_names(statement):
                graph[f"{module}.{name}"] = refs
    return graph


GRAPH = _reference_graph()


def _reached(start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for name in GRAPH.get(todo.pop(), ()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def _starts(name: str, command: click.Command) -> list[str]:
    """Where a command's code starts: its callback, for a generated ``train --task NAME`` (``train``: the
    default task's) the task's ``train`` function, which it reaches through the registry (``Task.run``), and for
    a task's own command (``translate``) its ``run``."""
    starts = [f"{command.callback.__module__}.{command.callback.__name__}"] if command.callback else []
    task = (tasks().get(name.removeprefix("train --task ")) if name.startswith("train --task ") else
            next(t for t in tasks().values() if t.default) if name == "train" else None)
    if task is not None and isinstance(task.train, str):
        starts.append(task.train.replace(":", "."))
    spec = task_commands().get(name)  # a task's own command: its run function
    if spec is not None and isinstance(spec.run, str):
        starts.append(spec.run.replace(":", "."))
    return starts


REACHED = {name: set().union(*(_reached(start) for start in _starts(name, c)))
           for name, c in COMMANDS.items() if c.callback is not None}


def _owner(message: Message) -> str:
    """The module-level name whose code holds ``message`` (its function, class or constant)."""
    path = SRC / message.module
    if message.function is not None:
        return f"{_qualified(path)}.{message.function}"
    for statement in ast.parse(path.read_text(encoding="utf-8")).body:
        if statement.lineno <= message.line <= (statement.end_lineno or statement.lineno) and _top_names(statement):
            return f"{_qualified(path)}.{_top_names(statement)[0]}"
    raise AssertionError(f"{message}: no function, class or constant holds it")


def reaching_commands(message: Message) -> list[str]:
    """The commands whose code can reach ``message``."""
    owner = _owner(message)
    return sorted(name for name, reached in REACHED.items() if owner in reached)


def wrong_flags(message: Message) -> list[str]:
    """What is wrong with the flags ``message`` names (empty: nothing)."""
    wrong = [f"{flag} is no option of any attnkit command" for flag in FLAG.findall(message.text)
             if flag not in ALL_FLAGS and flag not in FOREIGN]
    for named, rest in NAMED.findall(message.text):
        if named in FLAGS:
            wrong += [f"{flag} is no option of attnkit {named}" for flag in FLAG.findall(rest)
                      if flag not in FLAGS[named] and flag != "--task"]
    if message.module.startswith("cli/") and message.module not in SHARED_CLI:
        defined = _module_commands(message.module)
        own = defined.get(message.function or "")
        pool = [own] if own is not None else [
            *defined.values(), *(f for m in _importers(message.module) for f in _module_commands(m).values())]
        unnamed = NAMED.sub("", message.text)  # flags after "attnkit CMD" are that command's (above)
        if pool:
            wrong += [f"{flag} is no option of the command(s) {message.module} defines"
                      for flag in FLAG.findall(unnamed)
                      if flag not in FOREIGN and not any(flag in flags for flags in pool)]
    if message.module.startswith(READER_MODULES):
        unnamed = NAMED.sub("", message.text)
        wrong += [f"{flag} is no option of attnkit {command}, which reaches this message"
                  for command in reaching_commands(message)
                  if not (command in REREADS and message.module.startswith("data/"))
                  for flag in FLAG.findall(unnamed) if flag not in FOREIGN and flag not in FLAGS[command]]
    return wrong


def test_messages_are_found() -> None:
    modules = {m.module for m in MESSAGES}
    assert len(MESSAGES) > 60
    assert {"train/tasks/classify/command.py", "data/readers.py", "train/runs/rundir.py"} <= modules
    resume = [m for m in MESSAGES if m.module == "train/tasks/classify/training.py"
              and "attnkit train --out {} --resume" in m.text]
    assert resume and resume[0].function == "train_from_flags"
    assert {"train", "predict", "visualize", "train --task translate", "train --task caption"} <= set(COMMANDS)
    assert "--resume" in FLAGS["train"] and "--resume" not in FLAGS["demo"]


def test_the_commands_that_reach_a_reader_are_found() -> None:
    def reaching(function: str) -> list[str]:
        return reaching_commands(Message("data/readers.py", 1, function, ""))

    labelled = ["baseline", "cv", "evaluate", "report", "serve", "train"]  # --data, read by read_examples
    assert reaching("read_texts") == ["predict"]  # predict --file's text column
    assert reaching("_refuse_csv_header") == labelled
    assert reaching("_read_text") == sorted([*labelled, "predict"])
    skip_hint = next(m for m in MESSAGES if m.module == "data/examples.py" and "--skip-bad-rows" in m.text)
    assert reaching_commands(skip_hint) == labelled  # a module-level constant, reached through its class


@pytest.mark.parametrize("message", MESSAGES, ids=str)
def test_every_suggested_flag_exists_on_its_command(message: Message) -> None:
    assert not wrong_flags(message), f"{message}: {wrong_flags(message)}"


@pytest.mark.parametrize("text, module, function, expected", [
    ("pass --epochs 3", "viz/report.py", None, []),
    ("pass --epoch 3", "viz/report.py", None, ["--epoch is no option of any attnkit command"]),
    ("continue with attnkit demo --resume", "viz/report.py", None, ["--resume is no option of attnkit demo"]),
    ("give --src and --tgt", "cli/visualize.py", "visualize", ["--src is no option of the command(s) "
                                                               "cli/visualize.py defines", "--tgt is no option of "
                                                               "the command(s) cli/visualize.py defines"]),
    ("give --file", "cli/visualize.py", "visualize", []),
    # rule 4: read_texts is predict --file's reader, and predict has no --skip-bad-rows
    ("or pass --skip-bad-rows", "data/readers.py", "read_texts",
     ["--skip-bad-rows is no option of attnkit predict, which reaches this message"]),
    ("pass --delimiter ';'", "data/readers.py", "read_texts", []),
    # the training code and the finite-step policy too: demo and the translation and captioning trainers
    # reach the non-finite step's message and have no --on-nan; caption, evaluate... no --lr
    ("or pass --on-nan skip-step", "_finite.py", "StepGuard",
     [f"--on-nan is no option of attnkit {c}, which reaches this message"
      for c in ("demo", "train --task caption", "train --task translate")]),
    ("retrain with a lower --lr", "train/runs/run_files.py", "refuse_non_finite_file",
     [f"--lr is no option of attnkit {c}, which reaches this message"
      for c in ("caption", "evaluate", "predict", "report", "serve")]),
    ("start it again with attnkit train --overwrite", "train/runs/rundir.py", "committed_dir", []),
])
def test_the_rules_catch_a_wrong_flag(text: str, module: str, function: str | None, expected: list[str]) -> None:
    assert wrong_flags(Message(module, 1, function, text)) == expected


def test_the_collector_reads_messages_not_docs(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        '"""Module doc naming --nothing."""\n'
        'import click\n'
        'X = 1\n'
        '"""Data doc naming --nothing."""\n'
        '@click.option("--real", help="Help naming --nothing.")\n'
        'def f(v):\n'
        '    """Doc naming --nothing."""\n'
        '    raise ValueError(f"bad {v}; pass --real 2")\n', encoding="utf-8")
    assert [(m.text, m.function) for m in collect_messages(tmp_path)] == [("bad {}; pass --real 2", "f")]


def test_a_setting_in_backticks_is_written_as_the_commands_flag_or_bare() -> None:
    from attnkit.cli.messages import in_flags

    ctx = click.Context(cli)
    text = "lower `lr`, set `on_nan` or `max_memory`; keep `no_such_setting`"
    assert in_flags(text, cli.get_command(ctx, "train")) == ("lower --lr, set --on-nan or --max-memory; "
                                                      "keep no_such_setting")
    demo = in_flags(text, cli.get_command(ctx, "demo"))
    assert "--lr" not in demo and "--on-nan" not in demo and "`" not in demo
    assert in_flags(text) == "lower lr, set on_nan or max_memory; keep no_such_setting"  # no command running
