"""The contiguous-run path of block-sparse attention: taken where key runs have no gap, exact, else gather."""

from __future__ import annotations

import pytest
import torch

from attnkit import masks
from attnkit.core.functional import attention, last_backend
from attnkit.core.kernels.runs import run_plan

T = 300  # not a multiple of the block size: the last query and key blocks are cut


def _grads(mask: object, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
           **kw: object) -> tuple[torch.Tensor, ...]:
    out = attention(q, k, v, mask=mask, **kw)  # type: ignore[call-overload]
    return (out, *torch.autograd.grad(out, (q, k, v), g))


CONTIGUOUS = {
    "sliding window": masks.and_mods(masks.causal_mod, masks.sliding_window_mod(70)),
    "causal": masks.causal_mod,
    "packed documents": masks.document_mod(torch.arange(T) // 64),
    "prefix-LM": masks.prefix_lm_mod(90),
}


@pytest.mark.parametrize("name", sorted(CONTIGUOUS))
def test_contiguous_runs_take_views_and_match_the_dense_path(name: str) -> None:
    torch.manual_seed(0)
    bm = masks.create_block_mask(CONTIGUOUS[name], None, None, T, T, block_size=32)
    q, k, v = (torch.randn(2, 3, T, 16, requires_grad=True) for _ in range(3))
    g = torch.randn(2, 3, T, 16)
    got = _grads(bm, q, k, v, g)
    choice = last_backend()
    assert choice is not None and "contiguous key runs" in choice.reason
    plan = run_plan(bm)
    assert plan is not None and plan is run_plan(bm)  # found once, kept on the mask
    if name == "packed documents":  # the documents' equal runs share one strided kernel call
        assert max(call[6] for call in plan) > 1
    want = _grads(bm.to_dense(), q, k, v, g, backend="math")
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_split_heads_layout_is_read_in_place() -> None:
    torch.manual_seed(1)
    bm = masks.create_block_mask(CONTIGUOUS["sliding window"], None, None, T, T, block_size=32)
    q, k, v = (torch.randn(1, T, 2, 8).transpose(1, 2).requires_grad_() for _ in range(3))  # token-major
    g = torch.randn(1, 2, T, 8)
    got = _grads(bm, q, k, v, g)
    want = _grads(bm.to_dense(), q, k, v, g, backend="math")
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_gapped_runs_and_per_head_masks_take_the_gather_path() -> None:
    torch.manual_seed(2)
    gapped = masks.create_block_mask(lambda b, h, qi, ki: (ki % 128) < 32, None, None, T, T, block_size=32)
    per_head = masks.create_block_mask(masks.causal_mod, None, 2, T, T, block_size=32)
    q, k, v = (torch.randn(1, 2, T, 16, requires_grad=True) for _ in range(3))
    g = torch.randn(1, 2, T, 16)
    for bm in (gapped, per_head):
        got = _grads(bm, q, k, v, g)
        choice = last_backend()
        assert choice is not None and choice.name == "block-sparse" and "contiguous" not in choice.reason
        assert run_plan(bm) is None
        want = _grads(bm.to_dense(), q, k, v, g, backend="math")
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("native", [True, False])
def test_grouped_query_heads_take_the_runs_path_without_copies(native: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.core.kernels import runs

    if not native:  # a torch whose CPU flash kernel wants equal head counts: the heads are repeated
        monkeypatch.setattr(runs, "native_gqa", lambda: False)
    elif not runs.native_gqa():
        pytest.fail("torch's CPU flash kernel should take grouped key heads (torch >= 2.5)")
    torch.manual_seed(3)
    bm = masks.create_block_mask(CONTIGUOUS["sliding window"], None, None, T, T, block_size=32)
    q = torch.randn(2, 6, T, 16, requires_grad=True)
    k, v = (torch.randn(2, 2, T, 16, requires_grad=True) for _ in range(2))  # 3 query heads per key head
    g = torch.randn(2, 6, T, 16)
    got = _grads(bm, q, k, v, g)
    choice = last_backend()
    assert choice is not None and choice.route == "runs"
    assert got[2].shape == k.shape and got[3].shape == v.shape
    want = _grads(bm.to_dense(), q, k, v, g, backend="math")
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _planned_over_own_work(bm: object) -> float:
    """Entries the plan's kernel calls compute, over the entries of each query block's own key run."""
    plan = run_plan(bm)  # type: ignore[arg-type]
    assert plan is not None
    planned = sum(lq * sk * n for _, _, lq, _, _, sk, n, _ in plan)
    kv, ei = bm.kv_indices[0, 0], bm.elem_index[0, 0]  # type: ignore[attr-defined]
    bs = bm.block_size  # type: ignore[attr-defined]
    own = sum(bs * bs * int(n) for n in (ei > 0).sum(-1))
    assert kv.shape[0] * bs == bm.shape[2]  # type: ignore[attr-defined]  # whole blocks: the sums compare
    return planned / own


@pytest.mark.parametrize("name", ["sliding window", "causal"])
def test_the_plan_computes_little_beyond_each_query_blocks_own_run(name: str) -> None:
    # Mistral's layout: a window of 4 blocks. Merging two neighbouring query blocks would widen
    # both to 6 blocks (1.2x their own 5); groups of one shape become one strided call anyway.
    t = 4096
    mod = masks.and_mods(masks.causal_mod, masks.sliding_window_mod(512)) if name == "sliding window" \
        else masks.causal_mod
    bm = masks.create_block_mask(mod, None, None, t, t, block_size=128)
    assert _planned_over_own_work(bm) <= 1.1
    plan = run_plan(bm)
    assert plan is not None and len(plan) <= 12  # still few kernel calls


@pytest.mark.parametrize("layout", ["token-major", "expanded"])
def test_backward_reads_the_output_gradient_in_any_layout(layout: str) -> None:
    torch.manual_seed(4)
    bm = masks.create_block_mask(CONTIGUOUS["sliding window"], None, None, T, T, block_size=32)
    q, k, v = (torch.randn(1, T, 2, 8).transpose(1, 2).requires_grad_() for _ in range(3))
    if layout == "token-major":
        g = torch.randn(1, T, 2, 8).transpose(1, 2)
    else:
        g = torch.randn(1, 1, 1, 8).expand(1, 2, T, 8)
    got = _grads(bm, q, k, v, g)
    assert last_backend().route == "runs"  # type: ignore[union-attr]
    want = _grads(bm.to_dense(), q, k, v, g, backend="math")
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
