"""What each of two gloo processes runs once for the whole folder (tests/parallel/conftest.py)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from attnkit import attention
from attnkit.parallel import ContextParallelError, gather_sequence, local_positions, ring_attention, shard_sequence
from tests.parallel import cases


def qkv(tl: int, h: int = 2) -> list[torch.Tensor]:
    """Local q, k, v of ``tl`` positions, the same in every process."""
    g = torch.Generator().manual_seed(1)
    return [torch.randn(1, h, tl, 4, generator=g) for _ in range(3)]


def message(fn: Any) -> str:
    """The error ``fn()`` raises, as ``Type: text``, or ``"no error"``."""
    try:
        fn()
    except (ValueError, TypeError, ContextParallelError) as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def refusals(rank: int, world: int) -> dict[str, Any]:
    """Each bad call's error message (every process makes the same calls)."""
    q, k, v = qkv(8)
    found = {
        "odd length": message(lambda: ring_attention(*qkv(5))),
        "odd Tl, contiguous": message(lambda: ring_attention(*qkv(3), layout="contiguous", timeout=30)),
        "mask shape": message(lambda: ring_attention(q, k, v, mask=torch.ones(8, 8, dtype=torch.bool))),
        "causal differs": message(lambda: ring_attention(q, k, v, causal=rank == 0, timeout=30)),
        "layout differs": message(lambda: ring_attention(
            q, k, v, layout="balanced" if rank else "contiguous", timeout=30)),  # type: ignore[arg-type]
        "mask differs": message(lambda: ring_attention(q, k, v, mask=torch.tensor([16 - rank]), timeout=30)),
        "timeout": message(lambda: ring_attention(q, k, v, timeout=0)),
        "not a tensor": message(lambda: ring_attention(q, [1.0], v)),  # type: ignore[arg-type]
        "other local length": message(lambda: ring_attention(q, k[:, :, :4], v[:, :, :4])),
        "scale": message(lambda: ring_attention(q, k, v, scale=0.0)),
        "learned score_mod": message(lambda: ring_attention(
            q, k, v, score_mod=lambda s, b, h, i, j: s + table[h], timeout=30)),
    }
    # a group of one runs locally: attnkit.attention itself
    alone = [dist.new_group([r]) for r in range(world)][rank]
    out = ring_attention(q, k, v, causal=True, group=alone)
    found["group of one"] = bool(torch.equal(out, attention(q, k, v, causal=True)))
    # a BlockMask with causal=True: the rule of two or more processes (the pairs both allow) and of attention
    from attnkit.core.block_mask import create_block_mask, sliding_window_mod

    window = create_block_mask(sliding_window_mod(3), None, None, 8, 8, block_size=4)
    out = ring_attention(q, k, v, mask=window, causal=True, group=alone)
    both = attention(q, k, v, mask=window.to_dense() & torch.ones(8, 8, dtype=torch.bool).tril(), backend="math")
    found["group of one, BlockMask and causal"] = bool(torch.allclose(out, both, atol=1e-6))
    try:
        import transformers  # noqa: F401
        found["hf group of one, BlockMask"] = llama_alone_with_documents(alone)
    except ImportError:  # the hf extra is not installed
        found["hf group of one, BlockMask"] = None
    return found


def llama_alone_with_documents(alone: Any) -> float:
    """A tiny LLaMA under context_parallel in a group of one, mask=BlockMask of two documents (no causality: the
    decoder adds it): the largest difference of its logits to each document run alone (float64)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnkit.core.block_mask import create_block_mask, document_mod
    from attnkit.integrations.context_parallel import context_parallel

    t, cut = 16, 6
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         attn_implementation="sdpa")).double().eval()
    ids = torch.randint(0, 64, (1, t), generator=torch.Generator().manual_seed(2))
    positions = torch.arange(t)[None]
    docs = create_block_mask(document_mod(torch.tensor([0] * cut + [1] * (t - cut))), None, None, t, t, block_size=4)
    with torch.no_grad():
        with context_parallel(model, group=alone, mask=docs, timeout=30):
            packed = model(input_ids=ids, position_ids=positions, use_cache=False).logits
        alone_logits = [model(input_ids=ids[:, a:b], position_ids=positions[:, a:b], use_cache=False).logits
                        for a, b in ((0, cut), (cut, t))]
    return float((packed - torch.cat(alone_logits, 1)).abs().max())


table = torch.zeros(2, requires_grad=True)


def round_trip(rank: int, world: int) -> dict[str, Any]:
    """shard -> gather is the identity in both layouts, and gather's gradient is the slice of the full one."""
    found: dict[str, Any] = {}
    x = torch.arange(2 * 16 * 3, dtype=torch.float64).view(2, 16, 3)
    for layout in ("balanced", "contiguous"):
        local = shard_sequence(x, 1, layout=layout)  # type: ignore[arg-type]
        pos = local_positions(16, layout=layout)  # type: ignore[arg-type]
        found[f"{layout}/slice"] = bool(torch.equal(local, x[:, pos]))
        leaf = local.clone().requires_grad_()
        full = gather_sequence(leaf, 1, layout=layout, timeout=30)  # type: ignore[arg-type]
        found[f"{layout}/round_trip"] = bool(torch.equal(full, x))
        (full * torch.arange(16.0, dtype=torch.float64).view(1, 16, 1)).sum().backward()
        assert leaf.grad is not None
        found[f"{layout}/grad"] = bool(torch.equal(leaf.grad, pos.double().view(1, -1, 1).expand_as(leaf)))
    try:
        shard_sequence(torch.zeros(1, 6), 1)
    except ValueError as e:
        found["odd"] = str(e)
    return found


def two_worker(rank: int, world: int, exact: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Exactness of every case, the layouts' round trip, the encoder stack, a tiny LLaMA, then the refusals
    (which end with a group of one)."""
    try:
        import transformers  # noqa: F401
        hf: dict[str, float] | None = llama(rank, world)
    except ImportError:  # the hf extra is not installed: test_hf skips
        hf = None
    return {"exact": cases.exactness_worker(rank, world, exact), "layout": round_trip(rank, world),
            "stacks": stacks(rank, world), "llama": hf, "refusals": refusals(rank, world)}


def stacks(rank: int, world: int) -> dict[str, float]:
    """attnkit's encoder and decoder stacks under context_parallel against the same stacks on the whole sequence.

    Largest differences of the output, the inputs' gradients and the parameters' gradients
    (summed over the processes), per mask; the decoder reads a whole encoder memory.
    """
    from attnkit.blocks import TransformerDecoder, TransformerEncoder, TransformerLayerConfig
    from attnkit.core.block_mask import and_mods, causal_mod, create_block_mask, document_mod
    from attnkit.core.masks import AttentionMask
    from attnkit.parallel import context_parallel

    t = 32
    setups: dict[str, dict[str, Any]] = {
        "causal": {"causal": True},
        "padding": {"mask": AttentionMask.from_lengths([t, 20])},
        "documents": {"mask": create_block_mask(and_mods(causal_mod, document_mod(cases._docs(t))), None, None,
                                                 t, t, block_size=4)},
        "decoder": {"causal": True, "memory_mask": AttentionMask.from_lengths([10, 7])},
    }
    found: dict[str, float] = {}
    for name, kwargs in setups.items():
        torch.manual_seed(0)
        cfg = TransformerLayerConfig(d_model=16, num_heads=4, d_ff=32, kv_heads=2, norm_first=True)
        kind = TransformerDecoder if name == "decoder" else TransformerEncoder
        full, local = kind(cfg, 2).double().eval(), kind(cfg, 2).double().eval()
        local.load_state_dict(full.state_dict())
        x = torch.randn(2, t, 16, dtype=torch.float64, requires_grad=True)
        memory = torch.randn(2, 10, 16, dtype=torch.float64, requires_grad=True)
        w = torch.randn(2, t, 16, dtype=torch.float64)
        extra = (memory,) if name == "decoder" else ()
        y = full(x, *extra, **kwargs)
        (y * w).sum().backward()
        x_l = shard_sequence(x.detach(), 1).requires_grad_()
        memory_l = memory.detach().clone().requires_grad_()
        with context_parallel(local, timeout=30):
            y_l = local(x_l, *((memory_l,) if extra else ()), **kwargs)
        (y_l * shard_sequence(w, 1)).sum().backward()
        assert x.grad is not None and x_l.grad is not None
        diff = [(y_l - shard_sequence(y, 1)).abs().max(), (x_l.grad - shard_sequence(x.grad, 1)).abs().max()]
        pairs = list(zip(full.parameters(), local.parameters(), strict=True))
        if extra:
            pairs.append((memory, memory_l))
        for p, p_l in pairs:
            assert p.grad is not None and p_l.grad is not None
            dist.all_reduce(p_l.grad)  # each process holds its tokens' share
            diff.append((p_l.grad - p.grad).abs().max())
        found[name] = float(max(diff))
        found[name + "/restored"] = float(all("forward" not in m.__dict__ for m in local.modules()))
    return found


def llama(rank: int, world: int) -> dict[str, float]:
    """A tiny random LLaMA's training step on sharded ids, positions and labels against the unsharded step.

    Largest differences of the loss (summed over the processes) and of the parameters' gradients
    (summed over the processes), float64.
    """
    import torch.nn.functional as F
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnkit.integrations.context_parallel import context_parallel
    from attnkit.parallel import local_positions

    t = 32
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      attn_implementation="sdpa")
    full = LlamaForCausalLM(cfg).double()
    local = LlamaForCausalLM(cfg).double()
    local.load_state_dict(full.state_dict())
    ids = torch.randint(0, 64, (2, t), generator=torch.Generator().manual_seed(1))
    shifted = torch.cat([ids[:, 1:], ids.new_full((2, 1), -100)], 1)
    hf_loss = full(input_ids=ids, labels=ids, use_cache=False).loss.detach()  # (computed in float32 by transformers)
    logits_full = full(input_ids=ids, use_cache=False).logits  # (B, T, V)
    loss = F.cross_entropy(logits_full.flatten(0, 1), shifted.flatten(), ignore_index=-100)  # float64
    loss.backward()
    with context_parallel(local, timeout=30):
        logits = local(input_ids=shard_sequence(ids, 1), position_ids=local_positions(t)[None].expand(2, -1),
                       use_cache=False).logits  # (B, Tl, V)
    mine = F.cross_entropy(logits.flatten(0, 1), shard_sequence(shifted, 1).flatten(), ignore_index=-100,
                           reduction="sum") / (shifted != -100).sum()
    mine.backward()
    total = mine.detach().clone()
    dist.all_reduce(total)
    diff = [(total - loss).abs()]
    for (_, p), (_, p_l) in zip(full.named_parameters(), local.named_parameters(), strict=True):
        assert p.grad is not None and p_l.grad is not None
        dist.all_reduce(p_l.grad)
        diff.append((p_l.grad - p.grad).abs().max())
    return {"max_diff": float(max(diff)), "hf_loss_diff": float((total - hf_loss).abs()),
            "restored": float(local.config._attn_implementation == "sdpa")}
