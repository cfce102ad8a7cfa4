"""docs/cli.md against the commands themselves: every flag documented, nothing documented that is gone,
and every default the page states equal to the one the command uses.

The page's convention: one ``##`` section per command (``## attnkit train``, ``## attnkit train --task
translate``, ``## Global options`` for the group), each with tables whose header is ``flag | default |
meaning``. The first cell names the flags (`` `-q`, `--quiet` ``, `` `--epochs N` ``) or an argument
(`` `RUN` ``); a default cell that starts with a backticked value states a default (anything else, such
as ``—`` or ``required``, states none); ``numpy backend `X` `` in it states the NumPy backend's. A
command section also takes the tables of the ``###`` sections under ``## Flags shared by ...`` that it
links to. The commands are read from their click objects, not from ``--help`` text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from attnkit.cli import cli, train_tasks
from attnkit.cli.options import LibraryDefaultOption, resolve_default
from attnkit.train.registry import tasks

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
HEADER = ["flag", "default", "meaning"]
SHARED_PREFIX = "Flags shared"
GROUP_SECTION = "Global options"
_UNSET = getattr(click.core, "UNSET", None)  # click 8.3+ marks an option without a default so


# --- reading the page ------------------------------------------------------------------------------


@dataclass
class Section:
    title: str
    level: int
    lines: list[str] = field(default_factory=list)  # up to the next heading of the same or a higher level


@dataclass
class Row:
    names: list[str]  # flags ("--epochs", "-q") and arguments ("RUN", "TEXTS")
    default: str  # the default cell as written
    line: str


def sections(markdown: str) -> list[Section]:
    """The headings of ``markdown`` (outside fenced code) with their text."""
    out: list[Section] = []
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"(#{1,6}) (.+)", line)
        if heading:
            level = len(heading.group(1))
            for s in out:
                if s.level >= level:
                    s.level = -s.level  # closed: a later heading of its level or higher ended it
            out.append(Section(heading.group(2).strip(), level))
            continue
        for s in out:
            if s.level > 0:
                s.lines.append(line)
    for s in out:
        s.level = abs(s.level)
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def flag_rows(lines: list[str]) -> list[Row]:
    """The rows of every ``flag | default | meaning`` table in ``lines``."""
    rows: list[Row] = []
    in_table = False
    for line in lines:
        if not line.lstrip().startswith("|"):
            in_table = False
            continue
        cells = _cells(line)
        if cells == HEADER:
            in_table = True
        elif in_table and not set("".join(cells)) <= set("-: "):
            names = []
            for span in re.findall(r"`([^`]+)`", cells[0]):
                first = span.split()[0]
                names.append(first if first.startswith("-") else first.rstrip("."))
            rows.append(Row(names, cells[1], line))
    return rows


def _slug(title: str) -> str:
    """The anchor mkdocs gives a heading."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip().lower())


def command_rows(markdown: str, title: str) -> list[Row]:
    """The rows documenting section ``title``: its own tables and the shared ones it links to."""
    all_sections = sections(markdown)
    matches = [s for s in all_sections if s.title == title and s.level == 2]
    assert len(matches) == 1, f"docs/cli.md should have one '## {title}' section, found {len(matches)}"
    section = matches[0]
    shared: dict[str, Section] = {}
    parent = ""
    for s in all_sections:
        parent = s.title if s.level == 2 else parent
        if s.level == 3 and parent.startswith(SHARED_PREFIX):
            shared[_slug(s.title)] = s
    linked = set(re.findall(r"\]\(#([\w-]+)\)", "\n".join(section.lines)))
    rows = flag_rows(section.lines)
    for slug in sorted(linked & set(shared)):
        rows += flag_rows(shared[slug].lines)
    return rows


# --- comparing with a command ---------------------------------------------------------------------


def effective_default(param: click.Parameter, ctx: click.Context) -> Any:
    """What the command uses when the flag is absent: the library's default for a flag left None."""
    if isinstance(param, LibraryDefaultOption):
        return param.library_default()
    return param.get_default(ctx, call=False)


def _no_value(value: Any) -> bool:
    """Whether ``value`` is no default at all: unset, None, an unset switch, no repeated values."""
    return value is None or value is _UNSET or value is False or value == () or value == ""


def _stated(cell: str) -> str | None:
    return cell[1:].split("`", 1)[0] if cell.startswith("`") else None


def same_value(written: str, value: Any) -> bool:
    if value is None:
        return written == "none"
    if isinstance(value, bool):
        return written == str(value).lower()
    if isinstance(value, int | float):
        try:
            return float(written) == float(value)
        except ValueError:
            return False
    return written == str(value)


def _check_default(param: click.Option, row: Row, ctx: click.Context, has_backend: bool) -> list[str]:
    flag = param.opts[0]
    problems = []
    value = effective_default(param, ctx)
    written = _stated(row.default)
    if written is None and not _no_value(value):
        problems.append(f"{flag}: the page states no default, the command's is {value!r}")
    elif written is not None and not same_value(written, value):
        problems.append(f"{flag}: the page says default {written!r}, the command's is {value!r}")
    numpy_written = re.search(r"numpy backend:? `([^`]*)`", row.default)
    if has_backend and isinstance(param, LibraryDefaultOption):
        numpy_value = param.numpy_default()
        if numpy_written is None and numpy_value != value:
            problems.append(f"{flag}: the numpy backend's default {numpy_value!r} is not on the page")
        elif numpy_written is not None and not same_value(numpy_written.group(1), numpy_value):
            problems.append(f"{flag}: the page says numpy backend {numpy_written.group(1)!r}, "
                            f"the backend's default is {numpy_value!r}")
    return problems


def check_command(command: click.Command, rows: list[Row]) -> list[str]:
    """What ``rows`` (a section of docs/cli.md) get wrong about ``command``; empty when nothing."""
    ctx = click.Context(command)
    options = [p for p in command.params if isinstance(p, click.Option)]
    by_flag = {flag: p for p in options for flag in (*p.opts, *p.secondary_opts) if flag != "--help"}
    arguments = {p.human_readable_name for p in command.params if isinstance(p, click.Argument)}
    documented = {name for row in rows for name in row.names}
    problems = [f"{flag} is not on the page" for flag in sorted(set(by_flag) - documented)]
    problems += [f"argument {name} is not on the page" for name in sorted(arguments - documented)]
    problems += [f"{name} is on the page but not an option or argument of the command"
                 for name in sorted(documented - set(by_flag) - arguments)]
    has_backend = any(p.name == "backend" for p in options)
    for row in rows:
        params = {id(by_flag[n]): by_flag[n] for n in row.names if n in by_flag}
        if len(params) > 1:
            problems.append(f"one row documents several options: {row.line}")
        for param in params.values():
            problems += _check_default(param, row, ctx, has_backend)
    return problems


def documented_commands() -> dict[str, click.Command]:
    """Every command by the title of its section: the group, each subcommand, each ``train --task``."""
    ctx = click.Context(cli)
    out: dict[str, click.Command] = {GROUP_SECTION: cli}
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        out[f"attnkit {name}"] = command
    for task in train_tasks():
        if tasks()[task].default:  # its command is `attnkit train`'s
            continue
        _, command, _ = cli.resolve_command(ctx, ["train", "--task", task])
        assert command is not None
        out[f"attnkit train --task {task}"] = command
    return out


# --- the page ---------------------------------------------------------------------------------------


COMMANDS = documented_commands()


@pytest.mark.parametrize("title", sorted(COMMANDS))
def test_the_page_documents_each_command_truly(title: str) -> None:
    rows = command_rows(PAGE.read_text(encoding="utf-8"), title)
    problems = check_command(COMMANDS[title], rows)
    assert not problems, f"docs/cli.md, section '{title}':\n  " + "\n  ".join(problems)


def test_the_sixteen_sections_are_there_and_no_stray_command_section() -> None:
    assert len(COMMANDS) == 16  # the group, demo, train, evaluate, predict, cv, report, bench, 6 lazy, 2 tasks
    titles = [s.title for s in sections(PAGE.read_text(encoding="utf-8")) if s.level == 2]
    strays = [t for t in titles if t.startswith("attnkit") and t not in COMMANDS]
    assert not strays, f"sections for commands that do not exist: {strays}"


def test_flags_the_library_defaults_show_the_library_value() -> None:
    """A default written out beside the flag (DataSettings loads torch, so help does not import it)
    equals the library's own."""
    checked = 0
    for command in COMMANDS.values():
        for param in command.params:
            if isinstance(param, LibraryDefaultOption):
                assert param.library_default() == resolve_default(param.default_from), param.opts
                checked += 1
    assert checked >= 2 * 16  # train and cv: model, 10 training, 4 tokenizer, 3 reader flags


def test_help_shows_the_numpy_defaults_only_where_there_is_a_numpy_backend() -> None:
    from attnkit.train.config import TrainConfig
    from attnkit.train.tasks.numpy.numpy_backend import NUMPY_KINDS, NumpyTrainSettings

    train_help = CliRunner().invoke(cli, ["train", "--help"], terminal_width=400).output
    assert f"[default: {TrainConfig.lr:g}; numpy backend: {NumpyTrainSettings.lr:g}; x>0]" in train_help
    assert f"[default: {TrainConfig.warmup_ratio:g}; numpy backend: none; 0<=x<1]" in train_help
    assert all(kind in train_help.split("--model TEXT")[1].split("--model-opt")[0] for kind in NUMPY_KINDS)
    assert "numpy backend" not in CliRunner().invoke(cli, ["cv", "--help"], terminal_width=400).output


def test_model_and_format_help_name_every_choice() -> None:
    from attnkit.data.readers import FORMATS
    from attnkit.models import MODELS

    params = {p.name: p for p in COMMANDS["attnkit train"].params}
    assert all(name in (params["model"].help or "") for name in MODELS)
    assert all(name in (params["data_format"].help or "") for name in FORMATS)


def test_init_from_defaults_on_help_and_page_are_the_fine_tuning_ones() -> None:
    from attnkit.train.tasks.classify.finetune import FINETUNE_DEFAULTS, FINETUNE_MAX_LEN

    help_text = " ".join(next(p.help for p in COMMANDS["attnkit train"].params if p.name == "init_from").split())
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    for text in (help_text, page):
        found = re.search(r"lr `?([0-9.e-]+)`?, (\d+) epochs, max-len (\d+), no early stopping", text)
        assert found, text
        assert float(found.group(1)) == FINETUNE_DEFAULTS["lr"] and int(found.group(2)) == FINETUNE_DEFAULTS["epochs"]
        assert int(found.group(3)) == FINETUNE_MAX_LEN and FINETUNE_DEFAULTS["patience"] == 0


# --- negative controls: the checker fails when the page is wrong --------------------------------------


@click.command()
@click.argument("run")
@click.option("--alpha", type=int, default=3)
@click.option("--beta", "-b", is_flag=True)
@click.option("--lr", type=float, cls=LibraryDefaultOption, default_from="attnkit.train.config:TrainConfig.lr",
              numpy_default_from="attnkit.train.tasks.numpy.numpy_backend:NumpyTrainSettings.lr")
@click.option("--backend", type=click.Choice(["torch", "numpy"]), default="torch")
def fake(**values: Any) -> None:
    """A command for the negative controls."""


FAKE_PAGE = """\
## fake

| flag | default | meaning |
|---|---|---|
| `RUN` | required | a run |
| `--alpha N` | `3` | a number |
| `-b`, `--beta` | — | a switch |
| `--lr X` | `1e-3`; numpy backend `3e-3` | a rate |
| `--backend NAME` | `torch` | a backend |
"""


def test_the_checker_passes_a_true_page() -> None:
    assert check_command(fake, command_rows(FAKE_PAGE, "fake")) == []


@pytest.mark.parametrize("wrong, expected", [
    (lambda page: page.replace("| `-b`, `--beta` | — | a switch |\n", ""), "--beta is not on the page"),
    (lambda page: page.replace("`-b`, `--beta`", "`--beta`"), "-b is not on the page"),
    (lambda page: page.replace("| `RUN` | required | a run |\n", ""), "argument RUN is not on the page"),
    (lambda page: page + "| `--gamma` | — | gone |\n", "--gamma is on the page but not an option"),
    (lambda page: page.replace("| `--alpha N` | `3` |", "| `--alpha N` | `4` |"), "page says default '4'"),
    (lambda page: page.replace("| `--alpha N` | `3` |", "| `--alpha N` | — |"), "states no default"),
    (lambda page: page.replace("; numpy backend `3e-3`", ""), "numpy backend's default 0.003 is not on"),
    (lambda page: page.replace("numpy backend `3e-3`", "numpy backend `1e-3`"), "page says numpy backend"),
    (lambda page: page.replace("| flag | default | meaning |", "| option | default | meaning |"),
     "--alpha is not on the page"),
])
def test_the_checker_fails_a_wrong_page(wrong: Any, expected: str) -> None:
    problems = check_command(fake, command_rows(wrong(FAKE_PAGE), "fake"))
    assert any(expected in p for p in problems), problems


def test_a_shared_table_counts_only_where_it_is_linked() -> None:
    page = FAKE_PAGE.replace("| `--lr X` | `1e-3`; numpy backend `3e-3` | a rate |\n", "")
    shared = ("\n## Flags shared by fake\n\n### Rates\n\n| flag | default | meaning |\n|---|---|---|\n"
              "| `--lr X` | `1e-3`; numpy backend `3e-3` | a rate |\n")
    assert "--lr is not on the page" in check_command(fake, command_rows(page + shared, "fake"))
    linked = page.replace("## fake\n", "## fake\n\nSee [rates](#rates).\n") + shared
    assert check_command(fake, command_rows(linked, "fake")) == []
