"""The guided tour: every script under examples/ runs in small mode, writes
each file it promises in its module-level ``OUTPUTS`` list, and prints the
evidence for what its text claims (``CLAIMS``: a variance near 1, a zero row,
a permutation that changes nothing...), checked here on its printed output.

The scripts run in this process (``runpy``): one torch import for the whole
tour instead of one per script. One script also runs as a real subprocess, to
prove they work outside this harness.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import runpy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("[0-9][0-9]_*.py"))


def numbers(pattern: str, printed: str) -> list[float]:
    """Every match of ``pattern`` (one group, a number) in the printed text, as floats."""
    found = [float(m) for m in re.findall(pattern, printed)]
    assert found, f"nothing printed matches {pattern!r}:\n{printed}"
    return found


def claims_02(printed: str) -> None:
    for width, raw, scaled in re.findall(r"Dh=\s*(\d+): score variance unscaled\s+([\d.]+), scaled ([\d.]+)", printed):
        assert abs(float(scaled) - 1.0) < 0.15, f"scaled variance {scaled} at Dh={width}"
        assert 0.8 * int(width) < float(raw) < 1.2 * int(width), f"unscaled variance {raw} at Dh={width}"
    assert len(re.findall(r"score variance", printed)) >= 3


def claims_03(printed: str) -> None:
    assert re.search(r"after the -inf fill: +\[.*-inf", printed)
    assert "plain softmax of a fully masked row: [nan, nan, nan]" in printed
    assert "fully masked query 0: output [0.0, 0.0, 0.0, 0.0] ... weights [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]" in printed


def claims_04(printed: str) -> None:
    assert "head 0 (previous token): query i looks at key [0, 0, 1, 2, 3, 4, 5]" in printed
    assert "head 3 (first token): query i looks at key [0, 0, 0, 0, 0, 0, 0]" in printed


def claims_06(printed: str) -> None:
    assert numbers(r"without positions: .* = ([\d.e+-]+) \(equivariant\)", printed)[0] < 1e-5
    assert numbers(r"with positions: .* = ([\d.]+) \(order matters\)", printed)[0] > 1e-3


def claims_07(printed: str) -> None:
    for target, source in (("a", "ein"), ("dog", "hund"), ("runs", "läuft")):
        assert f"'{target}' attends most to '{source}'" in printed


def claims_08(printed: str) -> None:
    post = numbers(r"post-norm: gradient norm .* \(ratio ([\d.]+)\)", printed)[0]
    pre = numbers(r"pre-norm : gradient norm .* \(ratio ([\d.]+)\)", printed)[0]
    assert post > 1.0 > pre


def claims_09(printed: str) -> None:
    assert "rel_k is (2k + 1, Dh) = (7, 8): one table for all 4 heads" in printed
    a, b = numbers(r"w\[\d,\d\]/w\[\d,\d\] = ([\d.]+)", printed)
    assert a == b


def claims_11(printed: str) -> None:
    assert "test accuracy about 0.6 and gamma near 0" in printed and "(chance)" in printed
    accuracy, gamma = numbers(r"test accuracy ([\d.]+)  gamma", printed)[0], numbers(r"gamma ([+-][\d.]+)", printed)[0]
    assert abs(accuracy - 0.6) <= 0.05 and abs(gamma) < 0.01
    on_ink = numbers(r"puts ([\d.]+) of its attention on inked pixels", printed)[0]
    inked = numbers(r"\(([\d.]+) of the pixels are inked\)", printed)[0]
    assert abs(on_ink - inked) <= 0.03, "quick mode says the attention on ink is at chance"
    assert (on_ink, inked) == (0.37, 0.38)  # the figures docs/learn.md quotes


def claims_12(printed: str) -> None:
    assert numbers(r"previous-token head: layer \d, head \d+ \(([\d.]+) of each token", printed)[0] > 0.5
    assert max(numbers(r"share of attention on \[CLS\] per layer: \[([\d.]+)", printed)) > 0.1


def claims_14(printed: str) -> None:
    assert "test accuracy 1.0, with about 0.3 of the pooling weight on the key words, four times chance" in printed
    assert numbers(r"test accuracy: ([\d.]+)", printed)[0] == 1.0
    focus, chance = re.search(r"focus on the key words: ([\d.]+) \(chance ([\d.]+)\)", printed).groups()  # type: ignore[union-attr]
    assert abs(float(focus) - 0.3) <= 0.05 and float(focus) >= 4 * float(chance)


def claims_15(printed: str) -> None:
    from attnkit.data.synthetic import class_keywords

    assert "test accuracy 1.0, and the key words of each new sentence take nearly all of its pooling" in printed
    assert numbers(r"test accuracy: ([\d.]+)", printed)[0] == 1.0
    verdicts = re.findall(r"^\s*(positive|negative): (.*)$", printed, flags=re.M)
    assert [v for v, _ in verdicts] == ["positive", "negative", "positive"], verdicts
    keywords = {w for words in class_keywords(2).values() for w in words}
    for _, shaded in verdicts:
        on_keys = sum(float(w) for word, w in re.findall(r"(\w+)\[([\d.]+)\]", shaded) if word in keywords)
        assert on_keys >= 0.9, shaded


def claims_16(printed: str) -> None:
    assert "attend_with='current_state', attention_reg=0.0" in printed
    for loss, nll in re.findall(r"loss ([\d.]+) \(word nll ([\d.]+)", printed):
        assert loss == nll  # the penalty is measured, weighted 0
    assert ("the first object's colour is learnt (right in 8 of 8 captions), its shape and place are not yet: "
            "most shapes come out a triangle, and shape and place are right in only some of the 8") in printed
    colour, shape, place = map(int, re.findall(r"of 8 held-out captions, the first object's colour is right in "
                                               r"(\d+), its shape in (\d+), where it is in (\d+)", printed)[0])
    assert colour == 8 and 0 < shape < 8 and 0 < place < 8, (colour, shape, place)
    written = re.findall(r"^truth: .* model: a \w+ (\w+)", printed, flags=re.M)
    assert len(written) == 8 and written.count("triangle") > 4, written


def claims_17(printed: str) -> None:
    assert ("3 to 5 of the 8 test sentences come out exact with greedy decoding (the count depends on the CPU's "
            "arithmetic), as many or more with a beam of 4, and about 0.7 of each target token's attention is on "
            "its mirrored source word") in printed
    greedy = numbers(r"exact translations \(greedy\): (\d+)/8", printed)[0]
    assert 3 <= greedy <= 5 and greedy <= numbers(r"exact translations \(beam of 4\): (\d+)/8", printed)[0]
    assert abs(numbers(r"attention on its mirrored source word: ([\d.]+)", printed)[0] - 0.7) <= 0.05


def claims_18(printed: str) -> None:
    assert "validation accuracy reaches 1.0 by the last epoch and the held-out test accuracy is 1.0" in printed
    assert numbers(r"validation accuracy per epoch: \[.*, ([\d.]+)\]", printed) == [1.0]
    assert numbers(r"test accuracy \(held-out 10%.*\): ([\d.]+)", printed) == [1.0]
    assert "torch was imported" in printed


def claims_19(printed: str) -> None:
    assert "test accuracy 1.0, and the document drawn has most of its pooling weight on its key words" in printed
    assert numbers(r"\ntest accuracy ([\d.]+)", printed) == [1.0]
    assert numbers(r"\n  pooling weight on the key words: ([\d.]+)", printed)[0] >= 0.9  # docs/learn.md: 0.92
    assert numbers(r"replaced by 'the' ([\d.]+)", printed)[0] < 0.5  # the key words decide it
    focus, chance = re.search(r"on the key words: ([\d.]+) \(chance about ([\d.]+)\)", printed).groups()  # type: ignore[union-attr]
    assert float(focus) > 2 * float(chance)
    as_written = numbers(r"as written ([\d.]+)", printed)[0]
    swapped = numbers(r"replaced by '(?!the')\w+' ([\d.]+)", printed)[0]
    assert as_written > 0.5 > swapped, "a key word of the other class should flip the prediction"


def claims_20(printed: str) -> None:
    assert "cache size after steps 1, 2, 10, 40: 1, 2, 10, 40" in printed
    assert all(gap < 1e-5 for gap in numbers(r"max \|cached - [^=]*= ([\d.e+-]+)", printed))
    assert len(re.findall(r"max \|cached - ", printed)) == 3
    assert numbers(r"rolling \(window 8\): cache size at most (\d+)", printed) == [8]
    assert numbers(r"sinks \(2 sinks \+ window 8\): cache size at most (\d+)", printed) == [10]


def claims_21(printed: str) -> None:
    empty, partial, full = (int(n) for n in re.search(  # type: ignore[union-attr]
        r"(\d+) empty \(skipped\), (\d+) partial, (\d+) full", printed).groups())
    assert empty > 0 and partial > 0 and full > 0, "the figure should show all three kinds of tile"
    assert all(gap < 1e-5 for gap in numbers(r"max(?:imum)? (?:\|block mask - dense mask\| =|difference) ([\d.e+-]+)",
                                              printed))
    assert len(re.findall(r"vs by hand: max difference", printed)) == 2
    before, after = numbers(r"largest score ([\d.]+) before", printed)[0], numbers(r", ([\d.]+) after", printed)[0]
    assert after <= 2.0 < before


def claims_22(printed: str) -> None:
    assert numbers(r"one row: max \|acc / l - softmax\(s\) v\| = ([\d.e+-]+)", printed)[0] < 1e-12
    assert numbers(r"keys  0-  ?3: m = [+-][\d.]+, alpha = ([\d.]+)", printed) == [0.0]
    gaps = re.search(r"max \|tiles - plain\| output ([\d.e+-]+), gradients q ([\d.e+-]+), k ([\d.e+-]+), "
                     r"v ([\d.e+-]+)", printed)
    assert gaps is not None and all(float(g) < 1e-4 for g in gaps.groups())
    plain, tiles = (float(x) for x in re.search(r"plain memory x(\d+), tiles x(\d+)", printed).groups())  # type: ignore[union-attr]
    assert plain > 10 and tiles < 6, "quadratic against linear over a 4x longer sequence"


def claims_23(printed: str) -> None:
    assert numbers(r"classifier: max \|packed - one document at a time\| = ([\d.e+-]+)", printed)[0] < 1e-5
    assert numbers(r"with the document mask ([\d.e+-]+),", printed)[0] < 1e-5
    assert numbers(r"without it ([\d.]+) \(the documents", printed)[0] > 1e-2
    padded, packed = numbers(r"batch: .* (\d+)% padding", printed)
    assert packed < padded


def claims_24(printed: str) -> None:
    entropy = numbers(r"unigram entropy of the characters: ([\d.]+) nats", printed)[0]
    before, after = re.search(r"validation loss before training ([\d.]+), after .* ([\d.]+) nats", printed).groups()  # type: ignore[union-attr]
    assert float(after) < entropy < float(before), "the trained model should beat the unigram entropy"
    assert float(after) < entropy / 2  # docs/learn.md: well below it
    # quick mode: "120 steps learn the frequent words, spaces and full stops, with misspellings"
    from _common import OBJECTS, PLACES, SUBJECTS, VERBS  # the grammar the model learns (examples/ is on the path)

    grammar = {w for phrase in (*SUBJECTS, *VERBS, *OBJECTS, *PLACES) for w in phrase.split()}
    sample = re.search(r"\nsample: (.*)\n", printed).group(1)  # type: ignore[union-attr]
    words = sample.replace(".", " ").split()
    assert "." in sample and sum(w in grammar for w in words) >= len(words) / 2, sample
    assert any(w not in grammar for w in words[1:-1]), "quick mode says the sample still misspells words"
    assert numbers(r"max \|cached logits - recomputed logits\| .* = ([\d.e+-]+)", printed)[0] < 1e-4
    assert "same sample with and without the cache: True" in printed


def claims_25(printed: str) -> None:
    assert numbers(r"rotary: \|R\(3\)q.R\(10\)k - R\(53\)q.R\(60\)k\| = ([\d.e+-]+)", printed)[0] < 1e-5
    rotary = numbers(r"rotary: trained on .* \(x([\d.]+)\)", printed)[0]
    alibi = numbers(r"alibi: trained on .* \(x([\d.]+)\)", printed)[0]
    assert alibi < 1.2 < 1.5 < rotary, f"ALiBi should hold past the training length (x{alibi}), rotary not (x{rotary})"
    assert "ALiBi's loss past the training length stays at its loss on the trained positions, rotary's is several " \
           "times higher" in printed
    assert abs(alibi - 1.0) <= 0.1 and rotary >= 3  # docs/learn.md: x0.96 and x7.6 in quick mode


def claims_26(printed: str) -> None:
    assert "nn.TransformerEncoder: output unchanged by the capture: True" in printed
    assert "weight on the 2 padded keys of sequence 1: 0.0" in printed
    assert numbers(r"PyTorch's need_weights=True\| = ([\d.e+-]+)", printed)[0] < 1e-5
    if importlib.util.find_spec("transformers") is None:
        assert "it needs the [hf] extra" in printed
    else:
        assert "GPT-2 (sdpa): output unchanged by the capture: True" in printed
        assert numbers(r"returned by eager output_attentions\| = ([\d.e+-]+)", printed)[0] < 1e-5


CLAIMS: dict[str, Callable[[str], None]] = {
    name.removeprefix("claims_"): check for name, check in list(globals().items()) if name.startswith("claims_")
}


def quick_mode_examples() -> set[str]:
    """The numbers of the examples docs/learn.md's "When quick mode is too small to read" lists (``- **14, 15**:``)."""
    page = (EXAMPLES.parent / "docs" / "learn.md").read_text(encoding="utf-8")
    section = page.split("## When quick mode is too small to read")[1].split("\n## ")[0]
    items = re.findall(r"^- \*\*([\d, ]+)\*\*:", section, flags=re.M)
    return {number for item in items for number in re.findall(r"\d\d", item)}


QUICK = quick_mode_examples()


def promised_outputs(script: Path) -> list[str]:
    """The script's ``OUTPUTS = [...]``, read without running it."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "OUTPUTS" for t in node.targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list) and all(isinstance(v, str) for v in value)
            return value
    raise AssertionError(f"{script.name} declares no module-level OUTPUTS list")


def test_tour_is_numbered_in_order() -> None:
    numbers = [int(s.name[:2]) for s in SCRIPTS]
    assert len(SCRIPTS) >= 15, f"expected the tour's scripts in {EXAMPLES}, found {len(SCRIPTS)}"
    assert numbers == sorted(set(numbers)), "two scripts share a number"
    assert numbers[0] == 1


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_example_runs_and_writes_its_outputs(script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    outputs = promised_outputs(script)
    assert outputs, f"{script.name} promises no output file"
    out = tmp_path / "out"
    monkeypatch.setenv("ATTNKIT_EXAMPLES_SMALL", "1")
    monkeypatch.setattr(sys, "argv", [str(script), "--out", str(out)])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    printed = capsys.readouterr().out
    for name in outputs:
        path = out / name
        assert path.is_file(), f"{script.name} promised {name} but did not write it"
        assert path.stat().st_size > 0, f"{script.name} wrote an empty {name}"
        assert f"wrote {path}" in printed, f"{script.name} did not report writing {name}"
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert written <= set(outputs), f"{script.name} wrote undeclared files {sorted(written - set(outputs))}"
    # Every script prints the shapes it produces: at least one "(d, d...)" tuple.
    assert any(line.rstrip().endswith(")") and "(" in line for line in printed.splitlines()), printed
    if script.name[:2] in QUICK:  # docs/learn.md promises the line that says what quick mode shows
        assert re.search(r"^quick mode \(ATTNKIT_EXAMPLES_SMALL=1\): \S", printed, flags=re.M), printed
    check = CLAIMS.get(script.name[:2])
    if check is not None:
        check(printed)


def test_every_claim_check_names_a_script() -> None:
    assert set(CLAIMS) <= {s.name[:2] for s in SCRIPTS}
    assert {"02", "03", "06", "08", "12", "19", "20", "21", "22", "23", "24", "25", "26"} <= set(CLAIMS)


def test_learn_md_lists_every_example_with_a_quick_mode_line() -> None:
    """The task examples: each one that says what quick mode shows is listed in docs/learn.md, and back."""
    saying = {s.name[:2] for s in SCRIPTS if "quick_mode(" in s.read_text(encoding="utf-8")}
    assert QUICK == saying
    assert {"11", "14", "15", "16", "17", "18", "19", "24", "25"} <= QUICK
    assert QUICK <= set(CLAIMS), "each quick-mode line states figures its claim check reads"


def test_example_runs_as_a_script(tmp_path: Path) -> None:
    script = EXAMPLES / "01_queries_keys_values.py"
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "o")], capture_output=True,
                          text=True, timeout=120, env={"ATTNKIT_EXAMPLES_SMALL": "1", "PATH": "/usr/bin:/bin"},
                          check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o" / "01_lookup.txt").is_file()
    assert "weights = softmax(scores)" in done.stdout


def test_capture_example_names_the_hf_extra_without_transformers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    monkeypatch.setattr(sys, "argv", ["26_capture_other_models.py", "--out", str(tmp_path / "out")])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    runpy.run_path(str(EXAMPLES / "26_capture_other_models.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "Hugging Face part skipped: it needs the [hf] extra (pip install '.[hf]')" in printed
    assert "GPT-2" not in printed
    assert (tmp_path / "out" / "26_capture.png").is_file()


def test_learners_path_lists_every_example() -> None:
    page = (EXAMPLES.parent / "docs" / "learn.md").read_text(encoding="utf-8")
    rows = {line.split(" | ")[1].strip("`") for line in page.splitlines() if re.match(r"\| \d\d \| ", line)}
    assert rows == {s.name for s in SCRIPTS}, "docs/learn.md's table of the order must have one row per example"


REPO = EXAMPLES.parent
NOTEBOOK = EXAMPLES / "first_day.ipynb"


def test_the_notebook_runs_top_to_bottom(tmp_path: Path) -> None:
    """examples/first_day.ipynb, executed headlessly in a fresh kernel: every cell runs, its asserts hold."""
    import os

    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env_path) if p)
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
        if not env_path:
            del os.environ["PYTHONPATH"]
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert float(re.search(r"held-out accuracy ([\d.]+)", printed).group(1)) > 0.7  # type: ignore[union-attr]
    assert (tmp_path / "runs" / "notebook" / "current.json").is_file()


def test_the_sdist_ships_the_examples_and_the_notebook(tmp_path: Path) -> None:
    """The source distribution built from pyproject.toml and MANIFEST.in holds every example and the notebook."""
    import shutil
    import tarfile

    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tree / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in ("src", "examples"):
        shutil.copytree(REPO / folder, tree / folder, ignore=ignore)
    code = "import sys\nfrom setuptools import build_meta\nprint(build_meta.build_sdist(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=tree, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with tarfile.open(tmp_path / "dist" / done.stdout.strip().splitlines()[-1]) as sdist:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in sdist.getnames()}
    expected = {f"examples/{p.name}" for p in [*SCRIPTS, EXAMPLES / "_common.py", NOTEBOOK]}
    assert expected <= names, sorted(expected - names)
    assert "src/attnkit/bench/naive_relative.py" in names
