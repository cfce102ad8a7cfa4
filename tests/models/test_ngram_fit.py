"""The n-gram half's fit: lean (a CSR count matrix, a written-out gradient) and the same as the plain one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

from attnkit.data.batching import TokenIds
from attnkit.models import build_model
from attnkit.models import ngram_half as nh


def _model(vocab: int = 300, rows: int = 2000, classes: int = 3) -> nh.NgramHalf:
    model = build_model("wide", {"vocab_size": vocab, "num_classes": classes, "embed_dim": 8, "attention_dim": 8,
                                 "ngram_rows": rows})
    assert isinstance(model, nh.NgramHalf)
    return model


def _docs(n: int = 120, vocab: int = 300, seed: int = 0) -> tuple[TokenIds, list[int]]:
    rng = np.random.default_rng(seed)
    labels = [i % 3 for i in range(n)]
    docs = []
    for label, size in zip(labels, rng.integers(1, 80, size=n), strict=True):
        doc = rng.integers(2, vocab, size=int(size))
        doc[: size // 3] = 2 + 7 * label + rng.integers(0, 7, size=size // 3)  # words that tell the class
        docs.append(doc)
    return TokenIds(docs), labels


def _autograd_fit(counts: torch.Tensor, labels: list[int], ratios: torch.Tensor,
                  class_weights: list[float] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The regression as autograd through ``torch.sparse.mm`` fits it: the reference."""
    dense = counts.to_dense().double()
    x = (dense / dense.sum(1, keepdim=True).clamp_min(1).sqrt()).to_sparse()
    target = torch.as_tensor(labels)
    u = torch.zeros(ratios.shape, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(ratios.shape[1], dtype=torch.float64, requires_grad=True)
    weight = None if class_weights is None else torch.tensor(class_weights, dtype=torch.float64)
    opt = torch.optim.LBFGS([u, bias], max_iter=300, tolerance_grad=1e-6, history_size=nh.LBFGS_HISTORY,
                            line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        opt.zero_grad()
        value = nn.functional.cross_entropy(torch.sparse.mm(x, ratios * u) + bias, target, weight=weight)
        value = value + (u * u).sum() / (2 * nh.WIDE_C * len(labels))
        value.backward()
        return value

    opt.step(loss)  # type: ignore[arg-type]
    return (ratios * u).detach(), bias.detach()


@pytest.mark.parametrize("class_weights", [None, [0.5, 1.0, 2.0]])
def test_the_written_out_gradient_fits_what_autograd_fits(class_weights: list[float] | None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    docs, labels = _docs()
    model.bigram_keys.copy_(nh.frequent_bigrams(model, docs, 64))  # type: ignore[union-attr]
    counts = nh.ngram_counts(model, docs, 64)
    ratios = nh.naive_bayes_ratios(counts, labels, 3, 1.0)
    want, want_bias = _autograd_fit(counts, labels, ratios.double(), class_weights)  # float64 throughout
    monkeypatch.setattr(nh, "BLOCK_BYTES", 8 * 5 * 150)  # blocks of about 150 entries: many of them
    got, got_bias = nh.fit_nb_regression(counts, labels, ratios, class_weights)
    assert got.dtype == nh.FIT_DTYPE
    assert float((got - want).abs().max()) <= 1e-3 * float(want.abs().max())  # float32 tables: the same fit
    assert torch.allclose(got_bias.double(), want_bias, rtol=1e-3, atol=1e-4)
    coo = nh.fit_nb_regression(counts.to_sparse_coo(), labels, ratios, class_weights)[0]  # COO is read too
    assert float((coo - got).abs().max()) <= 1e-5 * float(want.abs().max())


def test_counts_are_compact_and_the_same_in_small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    docs, labels = _docs(n=60)
    keys = nh.frequent_bigrams(model, docs, 1024)
    counts = nh.ngram_counts(model, docs, 1024)
    assert counts.layout == torch.sparse_csr and counts.col_indices().dtype == torch.int32
    assert counts.values().dtype == torch.float32  # COUNT_BYTES an entry
    assert counts.col_indices().element_size() + counts.values().element_size() == nh.COUNT_BYTES
    monkeypatch.setattr(nh, "CHUNK_TOKENS", 100)  # a few documents a chunk: the bigram counts are merged
    assert torch.equal(nh.frequent_bigrams(model, docs, 1024), keys)
    assert torch.equal(nh.ngram_counts(model, docs, 1024).to_dense(), counts.to_dense())
    ratios = nh.naive_bayes_ratios(counts, labels, 3, 1.0)
    binary = (counts.to_dense() > 0).double()  # the ratios from the dense, binarised counts
    per_class = torch.stack([binary[torch.tensor(labels) == c].sum(0) for c in range(3)])
    seen = per_class.sum(0) > 0
    logp = ((per_class + 1.0) / (per_class + seen).sum(1, keepdim=True)).log()
    assert ratios.dtype == nh.FIT_DTYPE
    assert torch.allclose(ratios.double(), ((logp - logp.mean(0, keepdim=True)) * seen).T, atol=1e-6)


def test_merged_counts_add_up_and_keep_the_keys_sorted() -> None:
    keys, counts = torch.tensor([3, 7, 9]), torch.tensor([1, 2, 3], dtype=torch.int32)
    keys, counts = nh._merged_counts(keys, counts, torch.tensor([1, 7, 8, 20]), torch.tensor([5, 1, 1, 4]))
    assert keys.tolist() == [1, 3, 7, 8, 9, 20] and counts.tolist() == [5, 1, 3, 1, 3, 4]


BOUND_SCRIPT = textwrap.dedent("""
    import numpy as np
    import torch
    torch.set_num_threads(1)  # no per-thread buffers: the same figure however busy the machine is
    from attnkit.data.batching import TokenIds
    from attnkit.models import build_model
    from attnkit.models.ngram_half import fit_bytes
    rng = np.random.default_rng(0)
    vocab, rows, n = 5000, 5000, 200
    labels = [i % 3 for i in range(n)]
    docs = TokenIds([rng.integers(2, vocab, size=2500) for _ in range(n)])  # distinct bigrams: the worst case
    model = build_model("wide", {"vocab_size": vocab, "num_classes": 3, "embed_dim": 8, "attention_dim": 8,
                                 "ngram_rows": rows})
    model.init_from_training_data(docs[:3], labels[:3])  # the libraries the fit loads, loaded beforehand
    before = int(open("/proc/self/statm").read().split()[1]) * 4096
    model.init_from_training_data(docs, labels)
    # VmHWM, not getrusage's ru_maxrss: that one starts at the parent's peak when forked from a big process
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    grew = int(hwm.split()[1]) * 1024 - before
    print(grew, fit_bytes(vocab + rows, 3, int(docs.offsets[-1]), n))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_the_fit_stays_within_fit_bytes() -> None:
    out = subprocess.run([sys.executable, "-c", BOUND_SCRIPT], capture_output=True, text=True, check=True)
    grew, bound = (int(x) for x in out.stdout.split())
    assert 0 < grew <= bound, (grew, bound)


MANY_CLASSES_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import torch
    torch.set_num_threads(1)
    from attnkit.data.batching import TokenIds
    from attnkit.models import build_model
    from attnkit.models import ngram_half as nh
    nh.CHUNK_TOKENS, nh.BLOCK_BYTES = 2**14, 2**20  # small steps: what grows with the classes is measured
    nh.STEP_BYTES = max(nh.BLOCK_BYTES, 160 * nh.CHUNK_TOKENS)
    classes, vocab, rows, n = int(sys.argv[1]), 4000, 6000, 1000
    rng = np.random.default_rng(0)
    labels = [i % classes for i in range(n)]
    docs = []
    for label in labels:
        doc = rng.integers(2, vocab, size=100)
        doc[:10] = 2 + (7 * label + rng.integers(0, 7, size=10)) % (vocab - 2)  # words that tell the class
        docs.append(doc)
    docs = TokenIds(docs)
    small = build_model("wide", {"vocab_size": vocab, "num_classes": 2, "embed_dim": 8, "attention_dim": 8,
                                 "ngram_rows": 50})
    small.init_from_training_data(docs[:4], [0, 1, 0, 1])  # the libraries the fit loads, loaded beforehand
    model = build_model("wide", {"vocab_size": vocab, "num_classes": classes, "embed_dim": 8,
                                 "attention_dim": 8, "ngram_rows": rows})
    before = int(open("/proc/self/statm").read().split()[1]) * 4096
    model.init_from_training_data(docs, labels)
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(int(hwm.split()[1]) * 1024 - before, nh.fit_bytes(vocab + rows, classes, int(docs.offsets[-1]), n))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("classes", [20, 100])
def test_fit_bytes_is_the_fit_s_allocation_for_many_classes(classes: int) -> None:
    """The estimate within 30% of what the fit allocates, where the ``(S, C)`` tables are most of it, and
    far below a row and class's 1,664 bytes of old (100 correction pairs in float64; that fit allocated
    less than half of such an estimate in its first 20 steps, and 33 GiB once its history filled).

    glibc's mmap threshold is fixed for the measurement (``MALLOC_MMAP_THRESHOLD_``): otherwise it rises
    to the size of the first large block freed, and tables under 32 MB come from the heap, whose
    fragmentation adds to the resident size without any array being allocated."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**17)}
    out = subprocess.run([sys.executable, "-c", MANY_CLASSES_SCRIPT, str(classes)], capture_output=True, text=True,
                         check=True, env=env)
    grew, bound = (int(x) for x in out.stdout.split())
    assert 0.7 * bound <= grew <= 1.3 * bound, (grew, bound)
    assert nh.fit_bytes(10_000, classes, 0, 0) - nh.fit_bytes(10_000, 1, 0, 0) <= 130 * 10_000 * (classes - 1)
    # past a block of classes, a class costs the tables held over all of them: 16 bytes a row, not 124
    assert nh.fit_bytes(10_000, 200, 0, 0) - nh.fit_bytes(10_000, 100, 0, 0) == 16 * 10_000 * 100


@pytest.mark.parametrize("class_weights", [None, [0.5, 1.0, 2.0, 1.0, 0.7]])
def test_classes_fitted_a_block_at_a_time_reach_the_joint_fit(class_weights: list[float] | None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of two classes (three blocks for five classes), swept until the objective settles, reach the
    minimum that all classes fitted together reach: the same table to float32's precision, the same bias
    (but for a shift of all classes')."""
    model = _model(classes=5)
    docs, _ = _docs(n=200)
    labels = [i % 5 for i in range(len(docs))]
    model.bigram_keys.copy_(nh.frequent_bigrams(model, docs, 64))  # type: ignore[union-attr]
    counts = nh.ngram_counts(model, docs, 64)
    ratios = nh.naive_bayes_ratios(counts, labels, 5, 1.0)
    joint, joint_bias = nh.fit_nb_regression(counts, labels, ratios, class_weights)
    blocks = []
    monkeypatch.setattr(nh, "_fit_blocks", lambda *a: blocks.append(a) or _fit_blocks(*a))
    monkeypatch.setattr(nh, "CLASS_BLOCK", 2)
    monkeypatch.setattr(nh, "SWEEP_TOLERANCE", 1e-9)  # swept to the end: the minimum, not nearly it
    monkeypatch.setattr(nh, "MAX_SWEEPS", 50)
    got, got_bias = nh.fit_nb_regression(counts, labels, ratios, class_weights)
    assert blocks, "five classes in blocks of two were fitted all at once"
    assert float((got - joint).abs().max()) <= 2e-3 * float(joint.abs().max())
    # the bias is not penalised: the softmax leaves a shift of all classes' free, so it is compared centred
    assert torch.allclose(got_bias - got_bias.mean(), joint_bias - joint_bias.mean(), rtol=2e-3, atol=2e-3)


_fit_blocks = nh._fit_blocks


def test_the_transpose_built_in_blocks_is_the_transpose(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    docs, _ = _docs(n=60)
    counts = nh.ngram_counts(model, docs, 1024)
    monkeypatch.setattr(nh, "BLOCK_BYTES", 8 * 5 * 37)  # blocks of about 37 entries: a column spans many
    transposed = nh._transposed(counts)
    assert transposed.col_indices().dtype == counts.col_indices().dtype == torch.int32
    assert torch.equal(transposed.to_dense(), counts.to_dense().T)
