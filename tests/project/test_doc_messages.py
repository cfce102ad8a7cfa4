"""Every message the docs quote is one the program prints: a recipe runs the command and compares the text.

A quoted message is, on README.md and any page under docs/:

- the first code span of each row of a ``| message | what it means |`` table;
- any other code span, and any line of a fenced block without a language, that starts with ``Error: ``,
  ``warning: ``, ``note: ``, ``skipped N bad row``, ``attnkit's command line needs`` (the one message
  printed before click is there) or an exception's name (``KeyError: ``, ``torch._dynamo.exc.Unsupported: ``);
  a block after a line ``prints`` is a python block's output, which tests/project/test_doc_snippets.py
  compares whole.

``...`` in a quote stands for any text (a pid, a time, a long list); the rest must be, character for
character, a whole line of what the command printed. Each recipe below runs one command in a temporary
folder, under the names the pages use (``runs/reviews``, ``bad.csv``), and claims the quotes that contain
one of its keys. Every quote is claimed by exactly one key: a quote that no recipe claims, a key that
claims no quote, or a quote the program no longer prints fails here. A quote the tests cannot produce on
this machine is listed in ``NOT_PRODUCED`` with the reason, one skipped test each.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from attnkit.cli import cli
from tests.project.test_doc_snippets import PRINTS, doc_pages
from tests.support.cli import TINY, write_keyword_csv
from tests.support.runs import recorded

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")
SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
MESSAGE_START = re.compile(r"^(Error: |warning: |note: |skipped \d+ bad row|attnkit's command line needs "
                           r"|[A-Za-z_][\w.]*(Error|Exception|Unsupported): )")
TABLE_HEADER = re.compile(r"^\|\s*message\s*\|\s*what it means\s*\|\s*$")
TEMPLATES = {"Error: ...", "warning: ..."}  # the form of a message, not a message


@dataclass(frozen=True)
class Quote:
    page: str
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _squash(text: str) -> str:
    return " ".join(text.split())


def extract_quotes(markdown: str, page: str) -> list[Quote]:
    """The quoted messages of one page, in order (see the module's docstring)."""
    quotes: list[Quote] = []
    prose: list[tuple[int, str]] = []  # (line number, text) outside fenced blocks
    fence: str | None = None
    plain = False
    in_table = False
    previous = ""  # the last line of prose that is not blank
    for number, line in enumerate(markdown.split("\n"), start=1):
        opening = FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence) \
                    and not opening.group(2).strip():
                fence = None
            elif plain and MESSAGE_START.match(line.strip()) and line.strip() not in TEMPLATES:
                quotes.append(Quote(page, number, _squash(line)))
            continue
        if opening:
            fence = opening.group(1)
            plain = not opening.group(2).strip() and not PRINTS.match(previous)
            prose.append((number, ""))
            continue
        if TABLE_HEADER.match(line.strip()):
            in_table = True
            prose.append((number, ""))
            continue
        if in_table and line.lstrip().startswith("|"):
            cells = line.strip().strip("|").split("|")
            first = SPAN.search(cells[0])
            if first is not None:
                quotes.append(Quote(page, number, _squash(first.group(1))))
                line = line.replace(cells[0], "", 1)
        else:
            in_table = False
        prose.append((number, line))
        previous = line.strip() or previous
    text = "\n".join(line for _, line in prose)
    starts = [0]
    for _, line in prose:
        starts.append(starts[-1] + len(line) + 1)
    for span in SPAN.finditer(text):
        body = _squash(span.group(1))
        if MESSAGE_START.match(body) and body not in TEMPLATES:
            index = max(i for i, start in enumerate(starts) if start <= span.start())
            quotes.append(Quote(page, prose[index][0], body))
    return sorted(quotes, key=lambda q: q.line)


def page_quotes() -> list[Quote]:
    return [quote for path in doc_pages()
            for quote in extract_quotes(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())]


def printed(quote: str, output: str) -> bool:
    """Whether ``quote`` (``...``: any text) is a whole line of ``output``."""
    pattern = re.compile(".*?".join(re.escape(part) for part in quote.split("...")), re.DOTALL)
    return any(pattern.fullmatch(_squash(line)) for line in output.splitlines())


# --- the recipes ---------------------------------------------------------------------------------------


@dataclass
class Kit:
    """What a recipe may use: the working folder (also the current directory), a finished tiny run to copy,
    and pytest's monkeypatch."""

    cwd: Path
    trained: Path
    monkeypatch: pytest.MonkeyPatch

    def run(self, name: str = "runs/reviews") -> Path:
        """A copy of the finished tiny run at ``name``."""
        target = self.cwd / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.trained, target)
        return Path(name)


Recipe = Callable[[Kit], str]
RECIPES: dict[str, Recipe] = {}


def produces(*keys: str) -> Callable[[Recipe], Recipe]:
    """Register a recipe for the quotes that contain one of ``keys``."""
    def register(recipe: Recipe) -> Recipe:
        for key in keys:
            assert key not in RECIPES, key
            RECIPES[key] = recipe
        return recipe
    return register


def attnkit(*args: str, env: dict[str, str | None] | None = None) -> str:
    """What ``attnkit ARGS`` printed, stdout and stderr together."""
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.output


def _python(code: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "ATTNKIT_DEBUG"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environ, timeout=120)
    return done.stdout + done.stderr


def _error(call: Callable[[], object]) -> str:
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the message is what is compared
        # as a traceback's last line names it, as ``except ... as err: print(err)`` does, and the short name
        return f"{type(err).__module__}.{type(err).__qualname__}: {err}\n{err}\n{type(err).__name__}: {err}"
    return "(no error)"


def _committed(run: Path) -> Path:
    from attnkit.train.runs import checkpoint as ckpt

    return Path(ckpt.committed_dir(run))


def _edit_json(path: Path, edit: Callable[[dict], object]) -> None:
    """Edit a JSON file of a run's generation, its new bytes recorded (:func:`tests.support.runs.recorded`)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.unlink()
    path.write_text(json.dumps(data), encoding="utf-8")
    recorded(path)


@produces("Error: TypeError: ...")
def unexpected_error(kit: Kit) -> str:
    import attnkit.cli.visualize as visualize_module

    def fail(*_args: object, **_options: object) -> None:
        raise TypeError("unsupported operand type(s)")

    kit.monkeypatch.setattr(visualize_module, "run_attention", fail)
    run = kit.run()
    return attnkit("visualize", str(run), "a film", "-o", "a.html", env={"ATTNKIT_DEBUG": None})


@produces("needs the 'cli' extra")
def without_click(kit: Kit) -> str:
    from tests.cli.test_cli_errors import WITHOUT_CLICK

    return _python(WITHOUT_CLICK)


@produces("attnkit demo needs the 'viz' extra")
def without_matplotlib(kit: Kit) -> str:
    kit.monkeypatch.setitem(sys.modules, "matplotlib", None)
    return attnkit("demo", "--quick", "--quiet", "--out", "demo")


@produces("rt-polarity.pos, line 44")
def latin1_data(kit: Kit) -> str:
    mr = kit.cwd.parent / "shared" / "data" / "mr"
    mr.mkdir(parents=True)
    lines = [f"a film worth seeing number {i}" for i in range(43)] + ["the caf\xf3 scene"]
    (mr / "rt-polarity.pos").write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    (mr / "rt-polarity.neg").write_bytes(b"a dull film\n" * 44)
    return attnkit("cv", "--data", "../shared/data/mr", "--folds", "10")


@produces("enc.txt, line 2")
def predict_file_not_utf8(kit: Kit) -> str:
    run = kit.run()
    Path("enc.txt").write_bytes(b"a fine film\n\xff a ruined one\n")
    return attnkit("predict", str(run), "--file", "enc.txt")


@produces("bad.csv, line 3: empty text", "skipped 2 bad row(s) in bad.csv")
def bad_rows(kit: Kit) -> str:
    Path("bad.csv").write_text("text,label\nfine film,pos\n,neg\ngood,\nbad film,neg\n", encoding="utf-8")
    return attnkit("train", "--data", "bad.csv", "--out", "runs/bad", *TINY) + attnkit(
        "train", "--data", "bad.csv", "--out", "runs/bad", "--skip-bad-rows", *TINY)


@produces("text_field='review' is not a column")
def wrong_column(kit: Kit) -> str:
    write_keyword_csv(Path("reviews.csv"), 20)
    return attnkit("train", "--data", "reviews.csv", "--text-field", "review", "--out", "runs/r", *TINY)


@produces("reviews.txt, line 1: 'text,label' is a header")
def csv_named_txt(kit: Kit) -> str:
    write_keyword_csv(Path("reviews.txt"), 20)
    return attnkit("train", "--data", "reviews.txt", "--out", "runs/r", *TINY)


@produces("the file is UTF-16 text")
def utf16(kit: Kit) -> str:
    Path("reviews.csv").write_bytes("text,label\na fine film,pos\n".encode("utf-16"))
    return attnkit("train", "--data", "reviews.csv", "--out", "runs/r", *TINY)


@produces("the header ['text;label'] is one column")
def semicolons(kit: Kit) -> str:
    Path("reviews.csv").write_text("text;label\na fine film;pos\na dull film;neg\n", encoding="utf-8")
    return attnkit("train", "--data", "reviews.csv", "--out", "runs/r", *TINY)


@produces("two.csv holds 2 examples")
def too_little_data(kit: Kit) -> str:
    Path("two.csv").write_text("text,label\na fine film,pos\na dull film,neg\n", encoding="utf-8")
    return attnkit("train", "--data", "two.csv", "--out", "runs/r", *TINY)


@produces("--epochs is 3 there, given 5")
def resume_with_a_flag(kit: Kit) -> str:
    run = kit.run()
    return attnkit("train", "--out", str(run), "--resume", "--epochs", "5")


@produces("is 32 there, given 64")
def resume_with_a_changed_setting(kit: Kit) -> str:
    from tests.cli.test_cli_translate import interrupt_in_epoch, toy_corpus, write_pair

    src, tgt = write_pair(kit.cwd, toy_corpus(40), "train")
    args = ["train", "--task", "translate", "--src", str(src), "--tgt", str(tgt), "--out", "runs/de-en",
            "--vocab-size", "40", "--d-model", "32", "--num-heads", "2", "--d-ff", "32", "--encoder-layers", "1",
            "--decoder-layers", "1", "--epochs", "2", "--quiet"]
    with kit.monkeypatch.context() as patch:
        interrupt_in_epoch(patch, 2)
        attnkit(*args)
    return attnkit(*args, "--resume", "--d-model", "64")


@produces("note: classifying the 'text' column")
def predict_a_csv(kit: Kit) -> str:
    run = kit.run()
    write_keyword_csv(Path("reviews.csv"), 120)
    return attnkit("predict", str(run), "--file", "reviews.csv")


@produces("format must be one of")
def unknown_format(kit: Kit) -> str:
    write_keyword_csv(Path("reviews.csv"), 20)
    return attnkit("train", "--data", "reviews.csv", "--format", "parquet", "--out", "runs/r", *TINY)


@produces("data set 'mr' not found")
def data_set_not_found(kit: Kit) -> str:
    from attnkit.data.locations import data_path

    kit.monkeypatch.setenv("ATTNKIT_DATA", "/tmp/nothing")
    return _error(lambda: data_path("mr"))


@produces("already holds a different run")
def a_different_run(kit: Kit) -> str:
    run = kit.run()
    return attnkit("train", "--data", str(kit.trained.parent / "reviews.csv"), "--out", str(run), *TINY,
                   "--epochs", "2")


@produces("is not an attnkit run and not empty")
def a_folder_of_other_files(kit: Kit) -> str:
    Path("notarun").mkdir()
    Path("notarun/metrics.json").write_text("{}", encoding="utf-8")
    Path("notarun/report.html").write_text("<p>", encoding="utf-8")
    write_keyword_csv(Path("reviews.csv"), 60)
    return attnkit("train", "--data", "reviews.csv", "--out", "notarun", *TINY)


@produces("is being written by another process")
def locked(kit: Kit) -> str:
    from attnkit.train.runs.runlock import RunLock

    run = kit.run("runs/x")
    write_keyword_csv(Path("reviews.csv"), 60)
    lock = RunLock(run).acquire()
    try:
        return attnkit("train", "--data", "reviews.csv", "--out", str(run), "--overwrite", *TINY)
    finally:
        lock.release()


@produces("the disk is full")
def disk_full(kit: Kit) -> str:
    from attnkit.train.runs import fileops, rundir

    run = Path("runs/x")

    class FullDisk(fileops.FileOps):
        """Every write into the run fails with ENOSPC once it has a committed generation."""

        def write(self, path: Path, data: bytes) -> None:
            if (run / rundir.MANIFEST).is_file() and run.resolve() in path.resolve().parents:
                raise OSError(errno.ENOSPC, "No space left on device")
            super().write(path, data)

    kit.monkeypatch.setattr(fileops, "fs", FullDisk())
    write_keyword_csv(Path("reviews.csv"), 60)
    return attnkit("train", "--data", "reviews.csv", "--out", str(run), *TINY)


@produces("is a symbolic link to")
def link_loop(kit: Kit) -> str:
    Path("runs").mkdir()
    Path("runs/x").symlink_to("x")
    write_keyword_csv(Path("reviews.csv"), 60)
    return attnkit("train", "--data", "reviews.csv", "--out", "runs/x", *TINY)


@produces("has auto_map (")
def custom_code(kit: Kit) -> str:
    from tests.support.bert import write_tiny_bert

    folder = write_tiny_bert(_mkdir("path/to/model"), ["film"])
    _edit_json(folder / "config.json", lambda c: c.update(auto_map={"AutoModel": "modeling.MyModel"}))
    return attnkit("visualize", "path/to/model", "a film", "-o", "a.html")


@produces("pytorch_model.bin holds pickled weights")
def pickled_weights(kit: Kit) -> str:
    from tests.support.bert import write_tiny_bert

    folder = write_tiny_bert(_mkdir("path/to/model"), ["film"])
    (folder / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    return attnkit("visualize", "path/to/model", "a film", "-o", "a.html")


@produces("field hidden_size must be a positive int")
def negative_width(kit: Kit) -> str:
    from tests.support.bert import write_tiny_bert

    folder = write_tiny_bert(_mkdir("path/to/model"), ["film"])
    _edit_json(folder / "config.json", lambda c: c.update(hidden_size=-32))
    return attnkit("visualize", "path/to/model", "a film", "-o", "a.html")


@produces("a model with such weights computes nothing usable")
def hf_weights_not_finite(kit: Kit) -> str:
    from safetensors.torch import load_file, save_file

    from tests.support.bert import write_tiny_bert

    folder = write_tiny_bert(_mkdir("path/to/model"), ["film"])
    tensors = load_file(str(folder / "model.safetensors"))
    name = next(k for k, v in tensors.items() if v.is_floating_point() and v.numel() >= 3)
    tensors[name].view(-1)[:3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
    save_file(tensors, str(folder / "model.safetensors"))
    return attnkit("visualize", "path/to/model", "a film", "-o", "a.html")


def _mkdir(name: str) -> Path:
    Path(name).mkdir(parents=True)
    return Path(name)


@produces("interrupted before its first checkpoint; start again", "holds no committed checkpoint")
def killed_before_the_first_epoch(kit: Kit) -> str:
    from attnkit.train.runs import rundir, runlock

    (Path("runs/x") / f"{rundir.STAGING_PREFIX}abc").mkdir(parents=True)  # what a kill -9 in epoch 1 leaves
    (Path("runs/x") / runlock.LOCK).touch()
    write_keyword_csv(Path("reviews.csv"), 60)
    return attnkit("train", "--data", "reviews.csv", "--out", "runs/x", *TINY) + attnkit(
        "predict", "runs/x", "a film")


@produces("--baseline needs the 'tasks' extra")
def without_sklearn(kit: Kit) -> str:
    kit.monkeypatch.setitem(sys.modules, "sklearn", None)
    write_keyword_csv(Path("reviews.csv"), 60)
    return attnkit("train", "--data", "reviews.csv", "--out", "runs/x", *TINY, "--baseline")


def _unfinished(kit: Kit, name: str, data: str) -> Path:
    """A run of 200 epochs stopped (as by Ctrl-C) after its second epoch's commit."""
    from attnkit.train.runs import checkpoint as ckpt

    real = ckpt.RunCheckpointer.commit

    def commit_twice(self: object, *args: object, **kwargs: object) -> object:
        if self.writer.commits >= 2:  # type: ignore[attr-defined]
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    kit.monkeypatch.setattr(ckpt.RunCheckpointer, "commit", commit_twice)
    write_keyword_csv(Path(data), 60)
    attnkit("train", "--data", data, "--out", name, *TINY, "--epochs", "200")
    kit.monkeypatch.setattr(ckpt.RunCheckpointer, "commit", real)
    return Path(name)


@produces("did not finish training", "is unfinished (epoch")
def unfinished(kit: Kit) -> str:
    run = _unfinished(kit, "runs/long", "reviews.csv")
    return attnkit("predict", str(run), "a film") + attnkit("predict", str(run), "a film", "--allow-unfinished")


@produces("was trained on is gone", "is not the data run")
def resume_without_its_data(kit: Kit) -> str:
    run = _unfinished(kit, "runs/long", "r2.csv")
    write_keyword_csv(Path("other.csv"), 61)
    Path("r2.csv").unlink()
    return attnkit("train", "--out", str(run), "--resume") + attnkit(
        "train", "--out", str(run), "--resume", "--data", "other.csv")


@produces("finished training already; nothing to resume")
def resume_a_finished_run(kit: Kit) -> str:
    run = kit.run("runs/mine")
    return attnkit("train", "--out", str(run), "--resume")


@produces("is not an attnkit run directory")
def predict_a_folder(kit: Kit) -> str:
    Path("notarun").mkdir()
    return attnkit("predict", "notarun", "a film")


@produces("is not a readable safetensors file")
def truncated_weights(kit: Kit) -> str:
    run = kit.run("runs/broken")
    weights = _committed(run) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    recorded(weights)
    return attnkit("predict", str(run), "a film")


@produces("current.json is not valid JSON")
def damaged_manifest(kit: Kit) -> str:
    run = kit.run("runs/broken")
    (run / "current.json").write_text('{"a":\n}', encoding="utf-8")  # line 2 column 1 (char 6)
    return attnkit("predict", str(run), "a film")


@produces("is not the file its commit recorded")
def a_flipped_byte(kit: Kit) -> str:
    said = ""
    for name in ("runs/reviews", "runs/x"):
        weights = _committed(kit.run(name)) / "model.safetensors"
        raw = bytearray(weights.read_bytes())
        raw[len(raw) // 2] ^= 1
        weights.write_bytes(bytes(raw))
        said += attnkit("predict", name, "a film")
    return said


@produces("was committed without the digests of its files")
def a_run_committed_before_the_record(kit: Kit) -> str:
    run = kit.run("runs/old")
    _edit_json(run / "current.json", lambda m: m.pop("files"))
    return attnkit("predict", "runs/old", "a film")


@produces("also holds files attnkit did not write")
def a_user_file_inside_a_generation(kit: Kit) -> str:
    run = kit.run("runs/x")
    (_committed(run) / "mynotes.txt").write_text("mine", encoding="utf-8")
    return attnkit("train", "--data", str(kit.trained.parent / "reviews.csv"), "--out", "runs/x", *TINY,
                   "--overwrite")


@produces("out of memory under the address-space limit RLIMIT_AS")
def memory_runs_out_under_the_limit(kit: Kit) -> str:
    import resource

    import attnkit.train.memory_budget as mb

    def fail() -> None:
        raise MemoryError

    write_keyword_csv(Path("reviews.csv"), 60)
    kit.monkeypatch.setattr(mb, "memory_budget", fail)
    kit.monkeypatch.setattr(resource, "getrlimit", lambda which: (3 * 10**9, resource.RLIM_INFINITY))
    return attnkit("train", "--data", "reviews.csv", "--out", "runs/x", "--quiet")


@produces("training diverged at epoch")
def diverged(kit: Kit) -> str:
    write_keyword_csv(Path("reviews.csv"), 60)
    return attnkit("train", "--data", "reviews.csv", "--out", "runs/x", *TINY, "--lr", "1e30")


@produces("the weights of a diverged training are not served")
def run_weights_not_finite(kit: Kit) -> str:
    from safetensors.torch import load_file, save_file

    run = kit.run("runs/x")
    weights = _committed(run) / "model.safetensors"
    tensors = load_file(str(weights))
    name = next(k for k, v in tensors.items() if v.is_floating_point() and v.numel() >= 5)
    tensors[name].view(-1)[:1] = float("nan")
    save_file(tensors, str(weights))
    recorded(weights)
    return attnkit("predict", str(run), "a film")


@produces("labels.json lists 3 labels")
def three_labels(kit: Kit) -> str:
    run = kit.run("runs/x")
    _edit_json(_committed(run) / "labels.json", lambda f: f["labels"].append("neutral"))
    return attnkit("predict", str(run), "a film")


@produces("holds a model config that does not build")
def config_of_the_wrong_type(kit: Kit) -> str:
    run = kit.run("runs/x")
    _edit_json(_committed(run) / "config.json", lambda c: c["model_config"]["layer"].update(d_model=[16]))
    return attnkit("predict", str(run), "a film")


@produces("data_settings field max_len")
def data_setting_of_the_wrong_type(kit: Kit) -> str:
    run = kit.run("runs/x")
    _edit_json(_committed(run) / "config.json", lambda c: c["data_settings"].update(max_len="lots"))
    return attnkit("predict", str(run), "a film")


@produces("tokenizer.json gives token")
def token_id_past_the_embedding(kit: Kit) -> str:
    run = kit.run("runs/x")
    _edit_json(_committed(run) / "tokenizer.json", lambda t: t["model"]["vocab"].update(awful=1000000))
    return attnkit("predict", str(run), "a film")


@produces("wrong dtype for embedding.weight")
def weights_of_another_dtype(kit: Kit) -> str:
    from safetensors.torch import load_file, save_file

    run = kit.run("runs/x")
    weights = _committed(run) / "model.safetensors"
    tensors = load_file(str(weights))
    tensors["embedding.weight"] = tensors["embedding.weight"].long()
    save_file(tensors, str(weights))
    recorded(weights)
    return attnkit("predict", str(run), "a film")


@produces("requested but CUDA is not available")
def no_cuda(kit: Kit) -> str:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    write_keyword_csv(Path("reviews.csv"), 60)
    return attnkit("train", "--data", "reviews.csv", "--out", "runs/x", *TINY, "--device", "cuda")


@produces("--backend numpy does not support --device")
def numpy_on_cuda(kit: Kit) -> str:
    write_keyword_csv(Path("reviews.csv"), 60)
    return attnkit("train", "--data", "reviews.csv", "--out", "runs/np", "--backend", "numpy", "--device", "cuda")



@produces("warning: --warmup-steps 1000")
def translate_a_small_corpus(kit: Kit) -> str:
    from attnkit.train.tasks.translate import translation

    def stop(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt  # the warning comes before training; the test needs no training

    kit.monkeypatch.setattr(translation, "fit_translation", stop)
    Path("train.de").write_text("ein kleines haus\n" * 200, encoding="utf-8")
    Path("train.en").write_text("a small house\n" * 200, encoding="utf-8")
    return attnkit("train", "--task", "translate", "--src", "train.de", "--tgt", "train.en", "--out", "runs/de-en")


@produces("--port 8000: port 8000 on 127.0.0.1 is taken")
def port_taken(kit: Kit) -> str:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    run = kit.run()
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            holder.bind(("127.0.0.1", 8000))
            holder.listen()
        except OSError:
            pass  # another program holds it: taken all the same
        return attnkit("serve", str(run), "--port", "8000")
    finally:
        holder.close()


@produces("cannot listen there")
def a_host_that_cannot_be_listened_on(kit: Kit) -> str:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    return attnkit("serve", str(kit.run()), "--host", "256.1.1.1", "--port", "0")


@produces("HFBackendError: GPTNeoModel (model family 'gpt_neo')")
def gpt_neo_with_attnkit(kit: Kit) -> str:
    """A family whose layers bypass the interface, loaded with attn_implementation="attnkit", is refused as it
    is built."""
    transformers = pytest.importorskip("transformers")
    import attnkit.integrations.transformers  # noqa: F401 - registers "attnkit"

    config = transformers.GPTNeoConfig(vocab_size=50, bos_token_id=0, eos_token_id=0, hidden_size=16, num_heads=2,
                                       num_layers=1, attention_types=[[["global"], 1]], max_position_embeddings=32)
    transformers.GPTNeoForCausalLM(config).save_pretrained("gpt-neo")
    return _error(lambda: transformers.GPTNeoForCausalLM.from_pretrained("gpt-neo", attn_implementation="attnkit"))


@produces("AssertionError: Torch not compiled with CUDA enabled")
def cuda_stream_on_a_cpu_build(kit: Kit) -> str:
    if torch.backends.cuda.is_built():
        pytest.skip("this torch is built with CUDA")
    return _error(torch.cuda.default_stream)


@produces("NotImplementedError: FlexAttention does not support backward on CPU")
def flex_backward_on_cpu(kit: Kit) -> str:
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.randn(1, 1, 16, 8, requires_grad=True)
    return _error(lambda: flex_attention(q, q, q).sum().backward())


@produces("ContextParallelError: context parallelism lost rank 1")
def a_peer_dies_mid_ring(kit: Kit) -> str:
    from tests.parallel import spawn
    from tests.parallel.test_refusals import _lost_in_backward

    return str(spawn.run_rank0(_lost_in_backward, 2, kit.cwd)["message"])


@produces("torch._dynamo.exc.Unsupported: Observed exception")
def compiled_with_a_wrong_block_mask(kit: Kit) -> str:
    import attnkit
    from attnkit import masks

    q = torch.randn(1, 2, 24, 8)
    other = masks.create_block_mask(masks.causal_mod, None, None, 48, 48, block_size=16)
    compiled = torch.compile(attnkit.attention, backend="aot_eager", fullgraph=True)
    return _squashed(lambda: compiled(q, q, q, mask=other))


def _squashed(call: Callable[[], object]) -> str:
    """The error of ``call`` as :func:`_error` gives it, and its whole text on one line."""
    said = _error(call)
    return said + "\n" + _squash(said.split("\n", 1)[0] + " " + said)


@produces("AssertionError: Guard failed")
def exported_program_outside_its_shapes(kit: Kit) -> str:
    from torch.export import Dim

    from attnkit import MultiHeadAttention, masks

    attn = MultiHeadAttention(64, 4).eval()
    x = torch.randn(3, 12, 64)
    batch, time = Dim("B", max=256), Dim("T", max=512)
    program = torch.export.export(attn, (x,), kwargs={"mask": masks.from_lengths(torch.tensor([12, 7, 1]), 12)},
                                  dynamic_shapes={"query": {0: batch, 1: time}, "mask": {0: batch, 3: time}})
    too_long = torch.randn(1, 513, 64)
    return _error(lambda: program.module()(too_long, mask=masks.from_lengths(torch.tensor([513]), 513))) + "\n" + \
        _error(lambda: program.module()(x, mask=masks.from_lengths(torch.tensor([12, 7, 1]), 13)))


@produces("needs about 2 TB at most at once")
def a_plan_over_the_memory(kit: Kit) -> str:
    with open("long.csv", "w", encoding="utf-8") as fh:  # 300 documents of 2,000 of 3,000 words
        fh.write("text,label\n")
        for doc in range(300):
            words = " ".join(f"w{(doc * 397 + k * 7) % 3000}" for k in range(2000))
            fh.write(f"{words},{'pos' if doc % 2 else 'neg'}\n")
    return attnkit("train", "--data", "long.csv", "--out", "runs/long", "--model", "document", "--model-opt",
                   "layer.num_heads=64", "--max-len", "2000", "--batch-size", "256", "--max-memory", "1TB", "--quiet")

# Quotes no test here produces, by key, with the reason: one skipped test each, listed by pytest -rs.
NOT_PRODUCED: dict[str, str] = {}


# --- the pages against the recipes --------------------------------------------------------------------


QUOTES = page_quotes()
KEYS = [*RECIPES, *NOT_PRODUCED]


def claims(quote: Quote, keys: list[str] = KEYS) -> list[str]:
    return [key for key in keys if key in quote.text]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run of the keyword corpus (about a second of training)."""
    folder = tmp_path_factory.mktemp("trained")
    data = write_keyword_csv(folder / "reviews.csv", 60)
    run = folder / "run"
    result = CliRunner().invoke(cli, ["train", "--data", str(data), "--out", str(run), *TINY])
    assert result.exit_code == 0, result.output
    return run


@pytest.fixture
def kit(tmp_path: Path, trained: Path, monkeypatch: pytest.MonkeyPatch) -> Kit:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("ATTNKIT_DEBUG", raising=False)
    monkeypatch.delenv("ATTNKIT_DATA", raising=False)
    return Kit(work, trained, monkeypatch)


def test_every_quote_is_claimed_by_one_recipe() -> None:
    unclaimed = [f"{q.where}: {q.text}" for q in QUOTES if not claims(q)]
    several = [f"{q.where}: {q.text} (by {claims(q)})" for q in QUOTES if len(claims(q)) > 1]
    assert not unclaimed, "quoted messages no test produces:\n  " + "\n  ".join(unclaimed)
    assert not several, "quotes claimed by several recipes:\n  " + "\n  ".join(several)


def test_every_key_claims_a_quote() -> None:
    idle = [key for key in KEYS if not any(key in q.text for q in QUOTES)]
    assert not idle, f"recipes for messages no page quotes (remove them, or fix the key): {idle}"


@pytest.mark.parametrize("recipe", sorted(set(RECIPES.values()), key=lambda r: r.__name__),
                         ids=lambda r: r.__name__)
def test_quoted_messages_are_printed(recipe: Recipe, kit: Kit) -> None:
    keys = [key for key, r in RECIPES.items() if r is recipe]
    quotes = [q for q in QUOTES if claims(q, keys)]
    assert quotes, f"{recipe.__name__} claims no quote"
    output = recipe(kit)
    missing = [f"{q.where}: {q.text}" for q in quotes if not printed(q.text, output)]
    assert not missing, ("quoted but not printed:\n  " + "\n  ".join(missing)
                         + "\nthe command printed:\n" + textwrap.indent(output, "  | "))


@pytest.mark.parametrize("key", sorted(NOT_PRODUCED) or [None], ids=str)
def test_quotes_not_produced_are_listed(key: str | None) -> None:
    if key is not None:
        pytest.skip(f"quote with {key!r} not produced here ({NOT_PRODUCED[key]})")


# --- the extractor and the comparison, on text written here (negative controls) ----------------------


SAMPLE = """# Page

The command says `Error: disk full; free some` and `not a message`.

| message | what it means |
|---|---|
| `runs/x finished training already` | fine, also `warning: twice` |

```
Error: one line
plain output
```

```python
print("Error: in code")
```

prints

```
Error: in code
```
"""


def test_the_extractor_finds_table_cells_spans_and_plain_lines() -> None:
    found = [(q.line, q.text) for q in extract_quotes(SAMPLE, "p.md")]
    assert found == [(3, "Error: disk full; free some"), (7, "runs/x finished training already"),
                     (7, "warning: twice"), (10, "Error: one line")]


@pytest.mark.parametrize("quote, output, expected", [
    ("Error: a b", "x\nError: a b\n", True),
    ("Error: a b", "Error: a b c\n", False),           # a whole line, not a prefix
    ("Error: a ... c", "Error: a long b c\n", True),
    ("Error: a ... c", "Error: a long b d\n", False),
    ("Error: pid ... on ..., since ...", "Error: pid 7 on vm, since 12:00\n", True),
    ("Error: a (b)", "Error: a (b)\n", True),           # regular-expression characters are literal
    ("Error: a.b", "Error: axb\n", False),
])
def test_printed_compares_whole_lines(quote: str, output: str, expected: bool) -> None:
    assert printed(quote, output) is expected
