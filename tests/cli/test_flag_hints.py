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
   in one that imports it (a helper); flags after a named command are rule 2's.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

import attnkit
from attnkit.cli import LAZY_COMMANDS, TRAIN_TASKS, cli

SRC = Path(attnkit.__file__).resolve().parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# "attnkit CMD" or "attnkit train --task TASK", then the rest of the message
NAMED = re.compile(r"\battnkit (train --task (?:translate|caption)|[a-z]+)\b([^;:()]*)")
# Flags of other programs that messages may name, with the program.
FOREIGN = {"--force-reinstall": "pip"}
# cli modules shared by several commands: rule 3 does not apply (rules 1 and 2 do)
SHARED_CLI = {"cli/options.py", "cli/inputs.py", "cli/messages.py", "cli/rundata.py", "cli/__init__.py"}


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
    from attnkit.cli import _load

    for task, target in TRAIN_TASKS.items():
        found[f"train --task {task}"] = _load(target)
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
    return wrong


def test_messages_are_found() -> None:
    modules = {m.module for m in MESSAGES}
    assert len(MESSAGES) > 60 and {"cli/commands.py", "data/readers.py", "train/rundir.py"} <= modules
    resume = [m for m in MESSAGES if m.module == "cli/commands.py" and "--resume --overwrite" not in m.text
              and "continue with: attnkit train --out {} --resume" in m.text]
    assert resume and resume[0].function == "train"
    assert {"train", "predict", "visualize", "train --task translate", "train --task caption"} <= set(COMMANDS)
    assert "--resume" in FLAGS["train"] and "--resume" not in FLAGS["demo"]


@pytest.mark.parametrize("message", MESSAGES, ids=str)
def test_every_suggested_flag_exists_on_its_command(message: Message) -> None:
    assert not wrong_flags(message), f"{message}: {wrong_flags(message)}"


@pytest.mark.parametrize("text, module, function, expected", [
    ("pass --epochs 3", "train/pipeline.py", None, []),
    ("pass --epoch 3", "train/pipeline.py", None, ["--epoch is no option of any attnkit command"]),
    ("continue with attnkit demo --resume", "train/rundir.py", None, ["--resume is no option of attnkit demo"]),
    ("give --src and --tgt", "cli/commands.py", "predict", ["--src is no option of the command(s) cli/commands.py "
                                                            "defines", "--tgt is no option of the command(s) "
                                                            "cli/commands.py defines"]),
    ("give --file", "cli/commands.py", "predict", []),
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
