"""create_block_mask with block rules: whole blocks decided from their bounds, the same BlockMask as entry by entry."""

from __future__ import annotations

import random

import pytest
import torch
from torch import Tensor

from attnkit import masks
from attnkit.core import block_mask as bmod


def _same(a: masks.BlockMask, b: masks.BlockMask) -> None:
    assert a.shape == b.shape and a.block_size == b.block_size and a.counts == b.counts
    for name in ("kv_indices", "elem_index", "elements"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape and torch.equal(x, y), name


def _both(mod: masks.MaskMod, *args: object, monkeypatch: pytest.MonkeyPatch, **kw: object
          ) -> tuple[masks.BlockMask, masks.BlockMask]:
    fast = masks.create_block_mask(mod, *args, **kw)  # type: ignore[arg-type]
    with monkeypatch.context() as m:
        m.setattr(bmod, "_USE_RULES", False)
        slow = masks.create_block_mask(mod, *args, **kw)  # type: ignore[arg-type]
    return fast, slow


def _random_ids(rng: random.Random, b: int, t: int, padding: bool) -> Tensor:
    rows = []
    for _ in range(b):
        cuts = sorted(rng.sample(range(1, t), rng.randint(0, 6)))
        ids = torch.zeros(t, dtype=torch.long)
        for c in cuts:
            ids[c:] += 1
        if padding:  # a padded tail
            ids[t - rng.randint(0, t // 3):] = -1
        rows.append(ids)
    return torch.stack(rows)


@pytest.mark.parametrize("seed", range(12))
def test_ruled_construction_equals_the_exhaustive_one(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    t = rng.randint(20, 230)
    bs = rng.choice([8, 16, 32])
    batch = rng.choice([None, 1, 3])
    ids = _random_ids(rng, batch or 1, t, padding=rng.random() < 0.5)
    doc = masks.document_mod(ids if batch else ids[0])
    window = masks.sliding_window_mod(rng.randint(0, 40))
    prefix = masks.prefix_lm_mod(torch.tensor([rng.randint(0, t) for _ in range(batch)])
                                 if batch else rng.randint(0, t))
    mod = rng.choice([
        masks.causal_mod, window, doc, prefix,
        masks.and_mods(masks.causal_mod, window),
        masks.and_mods(masks.causal_mod, window, doc),
        masks.and_mods(doc, masks.or_mods(prefix, window)),
        masks.or_mods(window, doc),
    ])
    if batch is None and getattr(mod, bmod._NEEDS, []) and any(n[1] for n in getattr(mod, bmod._NEEDS)):
        batch = 1
    fast, slow = _both(mod, batch, None, t, t, block_size=bs, monkeypatch=monkeypatch)
    _same(fast, slow)


def test_rules_meet_mods_without_one_and_several_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bmod, "_CHUNK_ELEMENTS", 3000)  # several query-row chunks, several block batches
    ids = torch.tensor([[0] * 30 + [1] * 50 + [2] * 20 + [-1] * 7, [0] * 60 + [1] * 47])

    def stripes(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:  # no rule: evaluated
        return (kv_idx + h + b) % 3 != 0

    mods = [masks.and_mods(masks.causal_mod, masks.document_mod(ids), stripes),
            masks.or_mods(masks.sliding_window_mod(5), stripes)]
    for mod in mods:
        fast, slow = _both(mod, 2, 2, 107, 107, block_size=8, monkeypatch=monkeypatch)
        _same(fast, slow)
        assert fast.counts["partial"] > 0 and fast.counts["full"] + fast.counts["empty"] > 0
    fast, slow = _both(masks.prefix_lm_mod(40), None, None, 70, 107, block_size=16, monkeypatch=monkeypatch)
    _same(fast, slow)  # Tq != Tk


def test_a_window_evaluates_only_the_blocks_its_corners_leave_open() -> None:
    window = masks.and_mods(masks.causal_mod, masks.sliding_window_mod(512))
    seen = [0]

    def counted(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        out = window(b, h, q_idx, kv_idx)
        seen[0] += out.numel()
        return out

    bm = masks.create_block_mask(bmod.with_block_rule(counted, bmod.block_rule(window)), None, None, 8192, 8192)
    # the diagonal blocks and the window's lower edge: 2 of 64 key blocks per query block
    assert seen[0] <= 2 * 64 * 128 * 128
    # per query block i: key block i partial (diagonal), i-1..i-3 full, i-4 partial (the window's edge)
    assert bm.counts == {"full": 0 + 1 + 2 + 3 * 61, "partial": 64 + 60, "empty": 64 * 64 - 186 - 124}
    dense = bm.to_dense()[0, 0]
    q, k = torch.arange(8192)[:, None], torch.arange(8192)
    assert torch.equal(dense[:1000], ((k <= q) & (q - k <= 512))[:1000])


def test_a_rule_is_asked_only_when_sound() -> None:
    def lying(x: bmod.BlockBounds) -> tuple[bool, bool]:
        return False, False  # decides nothing: every block evaluated, same mask

    mod = bmod.with_block_rule(masks.causal_mod, lying)
    _same(masks.create_block_mask(mod, None, None, 50, 50, block_size=8),
          masks.create_block_mask(masks.causal_mod, None, None, 50, 50, block_size=8))
    assert bmod.with_block_rule(masks.causal_mod, None) is masks.causal_mod
