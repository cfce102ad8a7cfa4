"""BERT (Devlin et al., 2019) assembled from attnkit's BERT attention layers.

Module and parameter names follow Hugging Face ``transformers.BertModel``
(``embeddings.word_embeddings``, ``encoder.layer.N.attention.self.query``, ...)
so that a BERT folder on disk (``config.json``, ``model.safetensors``,
``tokenizer.json`` or ``vocab.txt``) loads unchanged with
:meth:`BertModel.from_pretrained`. Nothing is downloaded: the folder must exist.

Each encoder layer is ``x = LN(x + Attn(x)); x = LN(x + W2 GELU(W1 x))``
(post-norm), the attention being attnkit's fused :class:`BertAttention`.

Shape legend: B batch, T tokens, D hidden size, H heads, L layers.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.masks import (
    AttentionMask,
    BlockMask,
    MaskLike,
    as_attention_mask,
)
from attnkit.layers.bert import BertAttention, from_hf_attention_mask
from attnkit.layers.multi_head import Dropout
from attnkit.positional import check_positions

__all__ = ["BertConfig", "BertModel", "BertModelOutput", "load_bert_tokenizer"]

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu, "relu": F.relu, "gelu_new": lambda x: F.gelu(x, approximate="tanh")}


@dataclass(frozen=True)
class BertConfig:
    """The fields of a BERT ``config.json`` that the architecture needs."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(
                f"hidden_act {self.hidden_act!r} is not supported; valid: {sorted(_ACTIVATIONS)}"
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} must be divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BertConfig:
        """Read the known fields of a Hugging Face config dict; other keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        if data.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(
                f"position_embedding_type {data['position_embedding_type']!r} is not supported; "
                "valid: ['absolute']"
            )
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def from_file(cls, path: str | Path) -> BertConfig:
        """Read a ``config.json``; a ValueError names the file when it is not valid JSON."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path} is not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)


class BertModelOutput(NamedTuple):
    """What :meth:`BertModel.forward` returns.

    Shape:
        last_hidden_state ``(B, T, D)``; pooler_output ``(B, D)``;
        hidden_states ``L + 1`` tensors ``(B, T, D)`` (embeddings first);
        attentions ``L`` tensors ``(B, H, T, T)``, or ``None`` unless requested.
    """

    last_hidden_state: Tensor
    pooler_output: Tensor
    hidden_states: tuple[Tensor, ...]
    attentions: tuple[Tensor, ...] | None


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, LayerNorm, dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, d, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, d)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, d)
        self.LayerNorm = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor | None = None) -> Tensor:
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]  # (1, T)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(position_ids)
            + self.token_type_embeddings(token_type_ids)
        )  # (B, T, D)
        return self.dropout(self.LayerNorm(x))


class BertIntermediate(nn.Module):
    """The first feed-forward projection and its activation."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = _ACTIVATIONS[config.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))  # (B, T, intermediate_size)


class BertOutput(nn.Module):
    """The second feed-forward projection, dropout, residual and LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, hidden: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)  # (B, T, D)


class BertLayer(nn.Module):
    """One encoder layer: attention sub-layer, then feed-forward sub-layer."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(
            config.hidden_size, config.num_attention_heads,
            attention_probs_dropout_prob=config.attention_probs_dropout_prob,
            hidden_dropout_prob=config.hidden_dropout_prob, layer_norm_eps=config.layer_norm_eps,
        )
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: Tensor, mask: AttentionMask | None, return_weights: bool
                ) -> tuple[Tensor, Tensor | None]:
        if return_weights:
            attended, weights = self.attention(x, mask=mask, return_weights=True)
        else:
            attended, weights = self.attention(x, mask=mask), None
        return self.output(self.intermediate(attended), attended), weights


class BertEncoder(nn.Module):
    """The stack of :class:`BertLayer` (attribute ``layer``, as in Hugging Face)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))


class BertPooler(nn.Module):
    """``tanh(W h_[CLS] + b)``: the sentence vector of BERT's next-sentence objective."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, D)


class BertModel(nn.Module):
    """BERT encoder with Hugging Face parameter names; attention weights on request.

    Args:
        config: the architecture, usually read from ``config.json``.

    Shape:
        input_ids ``(B, T)``; attention_mask ``(B, T)`` 1 = token, 0 = padding;
        see :class:`BertModelOutput` for the outputs.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None, *, mask: MaskLike = None,
        return_weights: bool | Collection[int] = False, position_ids: Tensor | None = None,
    ) -> BertModelOutput:
        """Encode token ids; ``return_weights`` fills ``attentions``.

        Padding comes either as Hugging Face's ``attention_mask`` (1 = token,
        0 = padding), converted here, or -- from a model that built its mask
        already -- as ``mask``, attnkit's boolean key mask (True = may be
        attended) or a :class:`~attnkit.core.masks.BlockMask` for ``(B, H, T, T)``,
        which every layer uses as it is. A padded key gets exactly
        zero attention; padded positions still get hidden states (as in BERT),
        which callers ignore.

        ``return_weights=True`` returns every layer's weights; a collection of
        layer indices (negative ones count from the end) returns those layers'
        weights only, in layer order, and the other layers run without them.

        ``position_ids`` ``(T,)`` or ``(B, T)`` give each token its position
        (default ``0 .. T-1``); packed documents restart at 0, so a row may then
        be longer than ``max_position_embeddings``.

        Shape:
            input_ids ``(B, T)``; attention_mask ``(B, T)``; mask broadcasting
            to ``(B, H, T, T)``, e.g. ``(B, 1, 1, T)``; position_ids ``(T,)`` or ``(B, T)``.
        """
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2 or input_ids.dtype.is_floating_point:
            raise ValueError(
                f"input_ids must be an integer tensor (B, T), got "
                f"{getattr(input_ids, 'dtype', type(input_ids).__name__)} {tuple(getattr(input_ids, 'shape', ()))}"
            )
        t = input_ids.shape[1]
        if position_ids is not None:
            position_ids = check_positions(position_ids, input_ids.shape[0], t, input_ids.device)
        top = t if position_ids is None else int(position_ids.max()) + 1
        if top > self.config.max_position_embeddings:
            raise ValueError(
                f"input_ids need positions up to {top - 1}; this model takes at most "
                f"max_position_embeddings={self.config.max_position_embeddings} positions"
            )
        if attention_mask is not None and mask is not None:
            raise ValueError("pass attention_mask (Hugging Face's 1/0) or mask (attnkit's boolean), not both")
        pairs = mask.allowed if isinstance(mask, AttentionMask) else mask
        if isinstance(pairs, BlockMask):
            pairs.check(input_ids.shape[0], self.config.num_attention_heads, t, t, input_ids.device)
        elif attention_mask is not None:
            if attention_mask.shape != input_ids.shape:
                raise ValueError(
                    f"attention_mask shape {tuple(attention_mask.shape)} must equal "
                    f"input_ids shape {tuple(input_ids.shape)}"
                )
            mask = from_hf_attention_mask(attention_mask)  # (B, 1, 1, T)
        # built once, by the rule of every layer, and read by every layer
        keys = as_attention_mask(mask, (input_ids.shape[0], self.config.num_attention_heads, t, t))
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        wanted = self._weight_layers(return_weights)
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (B, T, D)
        hidden: list[Tensor] = [x]
        attentions: list[Tensor] = []
        for index, layer in enumerate(self.encoder.layer):
            x, weights = layer(x, keys, index in wanted)
            hidden.append(x)
            if weights is not None:
                attentions.append(weights)
        return BertModelOutput(
            x, self.pooler(x), tuple(hidden), tuple(attentions) if return_weights is not False else None
        )

    def _weight_layers(self, request: bool | Collection[int]) -> set[int]:
        """The indices of the layers whose weights ``return_weights=request`` asks for."""
        n = self.config.num_hidden_layers
        if isinstance(request, bool):
            return set(range(n)) if request else set()
        if not isinstance(request, Collection) or not all(
            isinstance(i, int) and not isinstance(i, bool) and -n <= i < n for i in request
        ):
            raise ValueError(
                f"return_weights must be a bool or a collection of layer indices in [-{n}, {n}), got {request!r}"
            )
        return {i % n for i in request}

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> BertModel:
        """Load ``config.json`` and ``model.safetensors`` from a local BERT folder.

        The folder is checked first (:func:`attnkit._hf_folder.check_model_folder`):
        a config with ``auto_map`` (custom code), pickled weights, sizes that are not positive
        ints or do not fit the memory or the weights are refused by name, before anything is
        built; so are weights that hold NaN or infinity (naming the file and the tensors).

        Accepts tensors named with or without the ``bert.`` prefix; task heads
        (``cls.*``, ``classifier.*``) and the ``embeddings.position_ids``
        buffer are skipped. Missing or unexpected weights raise an error that
        lists them.
        """
        from safetensors.torch import load_file

        from attnkit._finite import non_finite_names
        from attnkit._hf_folder import check_model_folder, refuse_non_finite_weights

        folder = check_model_folder(directory)  # no custom code, no pickles, readable headers, sizes that fit
        for name in ("config.json", "model.safetensors"):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder} is not a BERT folder: {name} is missing")
        tensors = load_file(str(folder / "model.safetensors"))
        refuse_non_finite_weights(folder / "model.safetensors", non_finite_names(tensors))
        model = cls(BertConfig.from_file(folder / "config.json"))
        state: dict[str, Tensor] = {}
        for name, tensor in tensors.items():
            name = name.removeprefix("bert.")
            if name.endswith("position_ids") or name.startswith(("cls.", "classifier.")):
                continue
            state[name] = tensor
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(
                f"{folder / 'model.safetensors'} does not match the BERT architecture: "
                f"missing {sorted(missing)[:8]}, unexpected {sorted(unexpected)[:8]}"
            )
        return model.eval()


def load_bert_tokenizer(directory: str | Path) -> Any:
    """The WordPiece tokenizer of a BERT folder: ``tokenizer.json``, else ``vocab.txt``.

    Returns a ``tokenizers.Tokenizer`` that adds ``[CLS]``/``[SEP]`` and does
    not pad; enable padding per batch with ``tokenizer.enable_padding()``.
    """
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer
    from tokenizers.processors import TemplateProcessing

    folder = Path(directory)
    if (folder / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_padding()  # callers choose padding per batch
        return tokenizer
    vocab_file = folder / "vocab.txt"
    if not vocab_file.is_file():
        raise FileNotFoundError(f"{folder} has neither tokenizer.json nor vocab.txt")
    vocab = {tok: i for i, tok in enumerate(vocab_file.read_text(encoding="utf-8").split("\n")) if tok}
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = BertPreTokenizer()
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return tokenizer
