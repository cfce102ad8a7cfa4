"""Which architectures a capture reads exactly: tiny random-weight models against their own eager maps.

:func:`coverage_row` builds one architecture from a small config (random
weights, nothing downloaded), runs it with its default kernels (SDPA where it
has one) with and without a capture, and compares:

* the output, bit for bit;
* every recorded map against the model's own eager ``output_attentions``
  (and ``decoder_attentions``/``cross_attentions`` for an encoder-decoder),
  matched by role and call order, on real (unpadded) queries;
* ``verify=True`` (:mod:`attnkit.inspect.verify`) on the same call.

A row is ``read`` (maps equal within 1e-5), ``refused`` (each attention
module is named in ``cap.unsupported`` or ``cap.missed``) or ``WRONG``
(a recorded map differs: the one outcome that must never happen).
``evals/inspect_parity.py`` prints the table; the tests run every row.

:func:`timm_coverage_row` does the same for a timm architecture
(:data:`TIMM_FAMILIES`, built with ``timm.create_model(..., pretrained=False)``
at a small size), whose eager maps are what each block passes through its
``attn_drop`` with every ``fused_attn`` turned off.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.inspect.capture import capture
from attnkit.inspect.verify import TOLERANCE, CaptureMismatch, map_difference

__all__ = ["FAMILIES", "TIMM_FAMILIES", "CoverageRow", "coverage_row", "timm_coverage_row", "tiny_model"]

_T = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
_DEC = dict(_T, num_key_value_heads=2, max_position_embeddings=64)
_S2S = dict(vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
_T5 = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4)

# family: (config class, model class, config keywords, input kind); "-eager" rows load attn_implementation="eager"
FAMILIES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "bert": ("BertConfig", "BertModel", _T, "text"),
    "roberta": ("RobertaConfig", "RobertaModel", dict(_T, pad_token_id=1), "text"),
    "electra": ("ElectraConfig", "ElectraModel", dict(_T, embedding_size=32), "text"),
    "modernbert": ("ModernBertConfig", "ModernBertModel", dict(_T, global_attn_every_n_layers=2,
                                                              local_attention=4, pad_token_id=0), "text"),
    "deberta-v2": ("DebertaV2Config", "DebertaV2Model", _T, "text"),
    "longformer": ("LongformerConfig", "LongformerModel", dict(_T, attention_window=4, pad_token_id=1), "text"),
    "big_bird": ("BigBirdConfig", "BigBirdModel", dict(_T, attention_type="original_full"), "text"),
    "gpt2": ("GPT2Config", "GPT2Model", dict(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64),
             "text"),
    "gpt_neo": ("GPTNeoConfig", "GPTNeoModel", dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                                                    attention_types=[[["global", "local"], 1]],
                                                    window_size=4, max_position_embeddings=64), "text"),
    "bloom": ("BloomConfig", "BloomModel", dict(vocab_size=64, hidden_size=32, n_layer=2, n_head=4), "text"),
    "falcon": ("FalconConfig", "FalconModel", dict(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                                   num_attention_heads=4, alibi=True), "text"),
    "falcon-eager": ("FalconConfig", "FalconModel", dict(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                                         num_attention_heads=4, alibi=True), "text"),
    "llama": ("LlamaConfig", "LlamaModel", _DEC, "text"),
    "mistral": ("MistralConfig", "MistralModel", dict(_DEC, sliding_window=4), "text"),
    "qwen2": ("Qwen2Config", "Qwen2Model", _DEC, "text"),
    "qwen3": ("Qwen3Config", "Qwen3Model", dict(_DEC, head_dim=8), "text"),
    "phi3": ("Phi3Config", "Phi3Model", dict(_DEC, pad_token_id=0), "text"),
    "gemma": ("GemmaConfig", "GemmaModel", dict(_DEC, head_dim=8), "text"),
    "gemma2": ("Gemma2Config", "Gemma2Model", dict(_DEC, head_dim=8, sliding_window=4,
                                                   attn_logit_softcapping=5.0), "text"),
    "gemma3": ("Gemma3TextConfig", "Gemma3TextModel", dict(_DEC, head_dim=8, sliding_window=4), "text"),
    "gpt_oss": ("GptOssConfig", "GptOssModel", dict(_DEC, head_dim=8, sliding_window=4, num_local_experts=2,
                                                    num_experts_per_tok=1), "text"),
    "mixtral": ("MixtralConfig", "MixtralModel", dict(_DEC, num_local_experts=2, num_experts_per_tok=1), "text"),
    "olmo2": ("Olmo2Config", "Olmo2Model", _DEC, "text"),
    "t5": ("T5Config", "T5Model", _T5, "seq2seq"),
    "umt5": ("UMT5Config", "UMT5Model", _T5, "seq2seq"),
    "bart": ("BartConfig", "BartModel", _S2S, "seq2seq"),
    "marian": ("MarianConfig", "MarianModel", dict(_S2S, decoder_start_token_id=0, pad_token_id=0), "seq2seq"),
    "whisper": ("WhisperConfig", "WhisperModel", dict(_S2S, num_mel_bins=8, max_source_positions=8,
                                                      max_target_positions=16, decoder_start_token_id=0,
                                                      pad_token_id=0), "speech"),
    "vit": ("ViTConfig", "ViTModel", dict(_T, image_size=16, patch_size=4, num_channels=3), "image"),
    "deit": ("DeiTConfig", "DeiTModel", dict(_T, image_size=16, patch_size=4, num_channels=3), "image"),
    "dinov2": ("Dinov2Config", "Dinov2Model", dict(_T, image_size=16, patch_size=4, num_channels=3), "image"),
    "clip_vision": ("CLIPVisionConfig", "CLIPVisionModel", dict(_T, image_size=16, patch_size=4), "image"),
    "siglip_vision": ("SiglipVisionConfig", "SiglipVisionModel", dict(_T, image_size=16, patch_size=4), "image"),
    "blip_vision": ("BlipVisionConfig", "BlipVisionModel", dict(_T, image_size=16, patch_size=4), "image"),
    "wav2vec2": ("Wav2Vec2Config", "Wav2Vec2Model", dict(_T, conv_dim=(8, 8), conv_stride=(4, 4),
                                                         conv_kernel=(4, 4), num_conv_pos_embeddings=4,
                                                         num_conv_pos_embedding_groups=2), "audio"),
}
"""The architectures of the coverage table: ``{family: (config class, model class, config keywords, input kind)}``."""


@dataclass
class CoverageRow:
    """One architecture's figures: how many maps, the worst difference, what was refused."""

    family: str
    outputs_equal: bool
    read: int
    worst: float
    refused: list[str]
    verified: bool | None
    note: str = ""

    @property
    def status(self) -> str:
        if self.worst > TOLERANCE or self.verified is False:
            return "WRONG"
        return "read" if self.read and not self.refused else ("partly read" if self.read else "refused")


def tiny_model(family: str, impl: str) -> nn.Module:
    """A small random-weight model of ``family`` (a key of :data:`FAMILIES`) under ``impl``."""
    import transformers

    config_name, model_name, kwargs, _ = FAMILIES[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**kwargs)
    return getattr(transformers, model_name)._from_config(config, attn_implementation=impl).eval()  # type: ignore[no-any-return]


def tiny_inputs(family: str) -> dict[str, Tensor]:
    """Inputs for :func:`tiny_model`: two sequences, the second padded (text), or random pixels/audio."""
    kind = FAMILIES[family][3]
    g = torch.Generator().manual_seed(1)
    if kind == "image":
        return {"pixel_values": torch.randn(2, 3, 16, 16, generator=g)}
    if kind == "audio":
        return {"input_values": torch.randn(2, 400, generator=g)}
    ids = torch.randint(3, 64, (2, 9), generator=g)
    keep = torch.ones(2, 9, dtype=torch.long)
    keep[1, 6:] = 0
    if kind == "text":
        return {"input_ids": ids, "attention_mask": keep}
    target = torch.randint(3, 64, (2, 5), generator=g)
    if kind == "speech":
        return {"input_features": torch.randn(2, 8, 16, generator=g), "decoder_input_ids": target}
    return {"input_ids": ids, "attention_mask": keep, "decoder_input_ids": target}


def _first_tensor(out: Any) -> Tensor:
    return out[0] if not isinstance(out, Tensor) else out


def _eager_maps(out: Any) -> dict[str, list[Tensor]]:
    """The eager model's own maps by role."""
    if getattr(out, "encoder_attentions", None) is not None:
        return {"encoder self": list(out.encoder_attentions), "decoder self": list(out.decoder_attentions),
                "cross": list(out.cross_attentions)}
    return {"self": list(out.attentions or [])}


def _rows(inputs: dict[str, Tensor], role: str, w: Tensor) -> Tensor | None:
    """Real query rows ``(B, 1, Tq, 1)`` of a map (padded encoder queries excluded)."""
    keep = inputs.get("attention_mask")
    if keep is None or role in ("decoder self", "cross") or keep.shape[-1] != w.shape[-2]:
        return None
    return keep.bool()[:, None, :, None]


def coverage_row(family: str, build: Callable[[str, str], nn.Module] = tiny_model) -> CoverageRow:
    """Capture ``family`` under its default kernels and compare with its eager maps (see the module)."""
    try:
        model = build(family, "eager" if family.endswith("-eager") else "sdpa")
    except ValueError:  # no SDPA path in this architecture: its default is eager
        model = build(family, "eager")
    eager = build(family, "eager")
    eager.load_state_dict(model.state_dict())
    inputs = tiny_inputs(family)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = _first_tensor(model(**inputs))
        try:
            with capture(model) as cap:
                seen = _first_tensor(model(**inputs))
        except ValueError as err:  # no module it can read: every one named
            return CoverageRow(family, True, 0, 0.0, [str(err).split("captured: ")[-1]], None, "refused")
        expected = _eager_maps(eager(**inputs, output_attentions=True))
        verified: bool | None = None
        checked: dict[str, float] = {}
        try:
            with capture(model, verify=True) as vcap:
                checked = vcap.verified
                model(**inputs)
            verified = True
        except CaptureMismatch as err:
            verified = "cannot be recomputed" in str(err) or False
    worst, read = 0.0, 0
    by_role: dict[str, list[str]] = {}
    for name in cap.weights:
        by_role.setdefault(cap.roles[name], []).append(name)
    for role, names in by_role.items():
        for name, ref in zip(names, expected.get(role, []), strict=False):
            w = cap.weights[name]
            rows = _rows(inputs, role, w)
            diff = map_difference(w, ref) if rows is None else map_difference(w * rows, ref * rows)
            worst = max(worst, diff)
            read += 1
    refused = list(cap.unsupported) + [f"{n}: {r}" for n, r in cap.missed.items()]
    # a map the eager model does not return (a pooling head's nn.MultiheadAttention) is checked by verify alone
    unchecked = len([n for n in cap.weights if n.split("#")[0] not in checked]) if read < len(cap.weights) else 0
    return CoverageRow(family, torch.equal(plain, seen), read, worst if not unchecked else float("inf"), refused,
                       verified, f"{unchecked} recorded maps without an eager counterpart" if unchecked else "")


TIMM_FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "timm vit": ("vit_tiny_patch16_224", dict(img_size=32, patch_size=8, depth=2, embed_dim=32, num_heads=4)),
    "timm swin": ("swin_tiny_patch4_window7_224", dict(img_size=56, depths=(2, 1), num_heads=(2, 4), embed_dim=16)),
    "timm beit": ("beit_base_patch16_224", dict(img_size=32, patch_size=8, depth=2, embed_dim=32, num_heads=4)),
    "timm eva02": ("eva02_tiny_patch14_224", dict(img_size=28, patch_size=7, depth=2, embed_dim=32, num_heads=4)),
    "timm cait": ("cait_xxs24_224", dict(img_size=32, patch_size=8, depth=2, depth_token_only=1, embed_dim=32,
                                         num_heads=4)),
    "timm convit": ("convit_tiny", dict(img_size=32, patch_size=8, depth=2, local_up_to_layer=1, embed_dim=32,
                                        num_heads=4)),
    "timm maxvit": ("maxvit_tiny_tf_224", dict(img_size=64)),
    "timm xcit": ("xcit_nano_12_p16_224", dict(img_size=32, depth=2)),
}
"""timm rows of the coverage table: ``{family: (timm model name, create_model keywords)}``."""


def _timm_eager_maps(model: nn.Module, x: Tensor) -> list[Tensor]:
    """Each attention block's map on the non-fused path, in call order (what goes through ``attn_drop``)."""
    maps: list[Tensor] = []
    blocks = [m for m in model.modules() if isinstance(getattr(m, "attn_drop", None), nn.Dropout)]
    fused: list[tuple[Any, bool]] = [(m, bool(m.fused_attn)) for m in blocks if hasattr(m, "fused_attn")]
    handles = [m.attn_drop.register_forward_hook(lambda _m, inp, _o: maps.append(inp[0]))  # type: ignore[union-attr]
               for m in blocks]
    try:
        for m, _ in fused:
            m.fused_attn = False
        model(x)
    finally:
        for m, flag in fused:
            m.fused_attn = flag
        for h in handles:
            h.remove()
    return maps


def timm_coverage_row(family: str) -> CoverageRow:
    """:func:`coverage_row` for a timm architecture of :data:`TIMM_FAMILIES` (needs ``timm``)."""
    import timm

    name, kwargs = TIMM_FAMILIES[family]
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    size = int(kwargs.get("img_size", 224))
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = model(x)
        try:
            with capture(model) as cap:
                seen = model(x)
        except ValueError as err:
            return CoverageRow(family, True, 0, 0.0, [str(err).split("captured: ")[-1]], None, "refused")
        expected = _timm_eager_maps(model, x)
        try:
            with capture(model, verify=True):
                model(x)
            verified: bool | None = True
        except CaptureMismatch:
            verified = False
    worst = max((map_difference(w, ref) for w, ref in zip(cap.weights.values(), expected, strict=False)),
                default=0.0)
    if len(expected) != len(cap.weights):
        worst = float("inf")  # a map recorded without its eager counterpart, or one missing without a name
    refused = list(cap.unsupported) + [f"{n}: {r}" for n, r in cap.missed.items()]
    return CoverageRow(family, torch.equal(plain, seen), len(cap.weights), worst, refused, verified)
