"""Memory checked before it is spent: the estimate against what is allocated, shrinking, refusing, reporting."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.data.batching import LabelVocab, TextClassificationDataset, TokenIds
from attnkit.data.readers import Example
from attnkit.data.tokenization import train_tokenizer
from attnkit.models import build_model
from attnkit.models.ngram_half import COUNT_BYTES, NgramHalf, ngram_counts
from attnkit.train import memory_budget as mb
from attnkit.train.runs.rundir import committed_dir
from attnkit.train.tasks.classify import memory as plan
from attnkit.train.tasks.classify.pipeline import model_config_dict
from tests.support.cli import write_keyword_csv

WIDE = ["--epochs", "1", "--batch-size", "16", "--device", "cpu", "--quiet", "--model-opt", "embed_dim=8",
        "--model-opt", "attention_dim=8"]


def _small_wide(classes: int = 3, rows: int = 700) -> dict:
    return model_config_dict("wide", {"ngram_rows": rows, "embed_dim": 8, "attention_dim": 8},
                             vocab_size=500, num_classes=classes, max_len=64)


def test_estimate_is_the_size_the_model_allocates() -> None:
    config = _small_wide()
    model = build_model("wide", config)
    params, buffers = plan.model_bytes("wide", config)
    assert params == sum(p.numel() * p.element_size() for p in model.parameters())
    assert buffers == sum(b.numel() * b.element_size() for b in model.buffers())
    assert buffers >= (500 + 700) * 3 * 4  # the n-gram table, float32
    est = plan.estimate_classifier("wide", config, tokens=1000, documents=123)
    assert est.total == 4 * params + buffers + est.ngram_fit + 123


def test_fit_estimate_bounds_the_count_matrix_it_builds() -> None:
    rng = np.random.default_rng(0)
    docs = TokenIds([rng.integers(2, 500, size=int(n)) for n in rng.integers(1, 60, size=80)])
    model = build_model("wide", _small_wide())
    assert isinstance(model, NgramHalf)
    counts = ngram_counts(model, docs, chunk=32)
    tokens = int(docs.offsets[-1])
    real = counts.col_indices().nbytes + counts.values().nbytes  # an int32 column and a float32 count each
    assert real <= 2 * tokens * COUNT_BYTES  # the estimate's bound for the count matrix
    assert real >= 2 * tokens * COUNT_BYTES / 4  # and not a wild over-estimate for distinct words
    # built a chunk at a time, it equals the one-pass count: repeats add up within a document
    dense = torch.zeros(counts.shape, dtype=torch.float64)
    for i, d in enumerate(docs):
        ids, _, mask = model._padded([d])
        feats, keep = model._features(ids, mask)
        dense[i].index_add_(0, feats[keep], torch.ones(int(keep.sum()), dtype=torch.float64))
    assert torch.equal(counts.to_dense().double(), dense)


def test_token_ids_are_compact_and_read_like_lists() -> None:
    ids = TokenIds([[5, 6, 7], [1], [2, 3]])
    assert len(ids) == 3 and ids[0].tolist() == [5, 6, 7] and ids[-1].tolist() == [2, 3]
    assert [x.tolist() for x in ids[1:]] == [[1], [2, 3]] and ids.flat.dtype == np.int32
    assert ids.nbytes == 6 * 4 + 4 * 8
    joined = TokenIds.concat([ids, TokenIds([[9, 9]])])
    assert [x.tolist() for x in joined] == [[5, 6, 7], [1], [2, 3], [9, 9]]
    with pytest.raises(IndexError, match="out of range for 3"):
        ids[3]
    texts = [Example("a fine film " * (i % 5 + 1), "pos" if i % 2 else "neg") for i in range(2500)]
    tok = train_tokenizer([e.text for e in texts], kind="word")
    ds = TextClassificationDataset(texts, tok, LabelVocab.from_examples(texts), max_len=8)
    assert ds.lengths[:3] == [3, 6, 8] and ds[4]["ids"].dtype == torch.long  # across encoding slices


@pytest.mark.parametrize(("text", "size"), [("4GB", 4 * 10**9), ("800MB", 8 * 10**8), ("1.5GiB", 3 * 2**29),
                                            ("512 kb", 512_000), ("1000", 1000)])
def test_parse_memory_size(text: str, size: int) -> None:
    assert mb.parse_memory_size(text) == size


@pytest.mark.parametrize("text", ["4 parsecs", "", "-1GB", "0"])
def test_parse_memory_size_refuses_by_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--max-memory"):
        mb.parse_memory_size(text)


def test_fit_to_memory_shrinks_the_rows_to_the_limit() -> None:
    config = _small_wide(rows=50_000)
    need = plan.estimate_classifier("wide", config, tokens=10_000).total
    assert plan.fit_to_memory("wide", config, tokens=10_000, limit=need) == config
    lines: list[str] = []
    limit = (need + plan.estimate_classifier("wide", {**config, "ngram_rows": plan.MIN_ROWS}, tokens=10_000).total) // 2
    shrunk = plan.fit_to_memory("wide", config, tokens=10_000, limit=limit, log=lines.append)
    rows = shrunk["ngram_rows"]
    assert plan.MIN_ROWS <= rows < 50_000
    assert plan.estimate_classifier("wide", shrunk, tokens=10_000).total <= limit
    assert plan.estimate_classifier("wide", {**shrunk, "ngram_rows": rows + 1}, tokens=10_000).total > limit
    assert len(lines) == 1 and f"using the {rows} most frequent bigrams" in lines[0]
    assert "`max_memory` to change" in lines[0]
    with pytest.raises(mb.MemoryLimitError, match="resumed run keeps its n-gram rows.*; raise `max_memory`"):
        plan.fit_to_memory("wide", config, tokens=10_000, limit=limit, can_shrink=False)


def test_ten_thousand_classes_are_refused_before_the_table_is_allocated(tmp_path, monkeypatch) -> None:
    built: list[int] = []
    real_add = NgramHalf._add_ngram_half

    def guarded(self, vocab_size, rows, num_classes, **kw):  # records every real (not meta) table
        if torch.get_default_device().type != "meta":
            built.append((vocab_size + rows) * num_classes)
        return real_add(self, vocab_size, rows, num_classes, **kw)

    monkeypatch.setattr(NgramHalf, "_add_ngram_half", guarded)
    data = tmp_path / "many.csv"
    with open(data, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        for i in range(20_000):
            writer.writerow([f"word{i % 97} word{i % 89} thing", f"class{i % 10_000}"])
    result = CliRunner().invoke(cli, ["train", "--data", str(data), "--out", str(tmp_path / "run"),
                                      "--val-ratio", "0", "--test-ratio", "0", "--max-memory", "300MB",
                                      *WIDE])
    assert result.exit_code == 1, result.output
    assert "10000 classes" in result.output and "(--max-memory), and about" in result.output
    assert "raise --max-memory" in result.output and "lower --vocab-size" in result.output
    assert "Traceback" not in result.output and built == []
    assert not (tmp_path / "run").exists()


def test_a_run_shrinks_its_rows_says_so_and_reports_its_peak(tmp_path) -> None:
    data = write_keyword_csv(tmp_path / "reviews.csv", 240)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["train", "--data", str(data), "--out", str(out), "--max-memory", "200MB",
                                      *WIDE], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("memory:"))
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    rows = meta["model_config"]["ngram_rows"]
    assert plan.MIN_ROWS <= rows < 200_000 and f"using the {rows} most frequent bigrams" in line
    peak = meta["metrics"]["peak_memory_mib"]
    assert 50 < peak == pytest.approx(mb.peak_rss_mib(), rel=0.5)
    refused = CliRunner().invoke(cli, ["train", "--data", str(data), "--out", str(out), "--max-memory", "2 lots"])
    assert refused.exit_code == 2 and "--max-memory" in refused.output


def test_activation_estimate_bounds_what_a_chunked_training_step_saves() -> None:
    from attnkit.models.wide import WideDeepClassifierConfig

    config = model_config_dict("wide", {"ngram_rows": 1000, "chunk_len": 256}, vocab_size=1000, num_classes=2,
                               max_len=256)
    model = build_model("wide", config).train()
    ids, lengths = torch.randint(2, 1000, (3, 1600)), torch.tensor([1600, 1600, 1500])
    saved: dict[int, int] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        model(ids, lengths).sum()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    held = sum(n for ptr, n in saved.items() if ptr not in params)
    estimate = WideDeepClassifierConfig.from_dict(config).activation_bytes(3 * 1600)
    assert held < estimate < 3 * held  # the saved tensors, and about as much again for their gradients
    est = plan.estimate_classifier("wide", config, tokens=1000, batch_tokens=3 * 1600)
    assert est.activations == estimate
    # the fit lets go of its memory before the first step: the peak holds the larger of the two
    assert est.total == 4 * est.params + est.buffers + max(est.ngram_fit, estimate)


def test_a_batch_too_large_for_the_limit_is_refused_naming_the_batch_size() -> None:
    config = _small_wide()
    small = plan.estimate_classifier("wide", config, tokens=1000, batch_tokens=64 * 1024)
    assert 0 < small.activations < small.ngram_fit  # the peak is the fit's, before training
    limit = small.total + 10**6
    assert plan.fit_to_memory("wide", config, tokens=1000, batch_tokens=1024, limit=limit) == config
    with pytest.raises(mb.MemoryLimitError, match=r"`batch_size` \(one batch's activations: about"):
        plan.fit_to_memory("wide", config, tokens=1000, batch_tokens=64 * 64_000, limit=limit)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_peak_of_a_process_forked_from_a_larger_one_is_its_own() -> None:
    big = b"\x01" * (300 * 2**20)  # touched pages: this process's peak: 300 MiB above a fresh interpreter's
    script = "from attnkit._memory import peak_rss_mib; print(peak_rss_mib())"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert float(out.stdout) < mb.peak_rss_mib() - 200, (out.stdout, mb.peak_rss_mib())  # ru_maxrss: the parent's
    del big
