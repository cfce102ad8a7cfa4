"""The captioner's configuration: one frozen dataclass, saved with every checkpoint."""

from __future__ import annotations

from dataclasses import dataclass

from attnkit.models.captioning.encoder import BACKBONES
from attnkit.models.config import ModelConfig, check_choice, check_fraction, check_positive_int

__all__ = ["ATTEND_WITH", "CaptionerConfig"]

ATTEND_WITH = ("previous_state", "current_state")
"""Which LSTM state queries the attention: the paper's previous one, or the one after reading the word."""


@dataclass(frozen=True)
class CaptionerConfig(ModelConfig):
    """Configuration of :class:`~attnkit.models.captioning.model.ImageCaptioner` (saved with every checkpoint).

    Args:
        vocab_size: words ``V`` including the special tokens.
        backbone: one of :data:`~attnkit.models.captioning.encoder.BACKBONES`.
        image_size: the square input side ``S`` the model expects.
        channels: widths of the built-in CNN's three stages (``"small"`` only).
            The defaults are sized for the generated shapes set; real photos
            want a ResNet backbone or wider stages.
        second_kernel: 1 or 3, the kernel of each stage's second convolution
            in the built-in CNN; it sets how far a region sees (see
            :class:`~attnkit.models.captioning.encoder.SmallCNN`).
        embed_dim: word embedding width (also the deep-output width).
        hidden_dim: LSTM width ``Hd``.
        attention_dim: hidden width of the additive attention.
        dropout: dropout before the output layer.
        attention_reg: ``λ`` of the doubly stochastic regulariser. The paper
            used it (λ = 1) for BLEU on photographs; it asks every region to
            be attended about once over the caption, so a second word about
            the same object is pushed to look elsewhere. On the shapes set it
            costs attention accuracy (see ``evals/captioning.py``), hence 0 here.
        max_len: longest caption generated, ``<eos>`` included.
        attend_with: ``"previous_state"`` (Xu et al.): attention is queried
            with ``h_{t-1}`` and its context enters the LSTM, which can then
            remember what it saw; ``"current_state"`` (the spatial attention
            of Lu et al., 2017, "Knowing When to Look"): the LSTM reads the
            word and the mean region, and attention is queried with ``h_t``,
            its context going only to the output, so each word must look again.
            The default: on the shapes set both reach BLEU 1.0, but only this
            order puts the attention for each object word on that object
            (see ``evals/captioning.py``).
        region_dim: 0 reads the encoder's region vectors as they are; > 0
            first projects them (one learned linear map) to this width, which
            makes every step cheaper for wide encoders (1280 for EfficientNet-Lite).
        gate: use the gating scalar ``β_t = σ(f_β(h))`` on the attended context
            (paper §4.2.1); False reads the context ungated.
        fine_tune_blocks: EfficientNet-Lite backbones only: how many of the
            encoder's last blocks (with its head convolution) are trained;
            0 keeps the pretrained encoder frozen (then region features can be
            cached, :mod:`attnkit.train.tasks.caption.feature_cache`).
        pad_id: the id of ``<pad>``.
        bos_id: the id of ``<bos>``.
        eos_id: the id of ``<eos>``.
        unk_id: the id of ``<unk>``, which generation never emits (a caption
            word that names nothing); None lets it be generated. It changes
            decoding only, never the weights, so runs saved before the field
            existed read the default too.
    """

    vocab_size: int
    backbone: str = "small"
    image_size: int = 48
    channels: tuple[int, ...] = (16, 32, 64)
    second_kernel: int = 3
    embed_dim: int = 32
    hidden_dim: int = 128
    attention_dim: int = 64
    dropout: float = 0.1
    attention_reg: float = 0.0
    max_len: int = 20
    attend_with: str = "current_state"
    region_dim: int = 0
    gate: bool = True
    fine_tune_blocks: int = 0
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int | None = 3

    def __post_init__(self) -> None:
        for name in ("vocab_size", "image_size", "embed_dim", "hidden_dim", "attention_dim", "max_len"):
            check_positive_int(name, getattr(self, name))
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone must be one of {list(BACKBONES)}, got {self.backbone!r}")
        if not isinstance(self.channels, tuple) or len(self.channels) != 3:
            raise ValueError(f"channels must be a tuple of 3 stage widths, got {self.channels!r}")
        if self.second_kernel not in (1, 3):
            raise ValueError(f"second_kernel must be 1 or 3, got {self.second_kernel!r}")
        for width in self.channels:
            check_positive_int("channels[i]", width)
        check_fraction("dropout", self.dropout)
        if not isinstance(self.gate, bool):
            raise TypeError(f"gate must be a bool, got {type(self.gate).__name__}")
        check_positive_int("fine_tune_blocks", self.fine_tune_blocks, allow_zero=True)
        check_positive_int("region_dim", self.region_dim, allow_zero=True)
        if self.fine_tune_blocks and not self.backbone.startswith("efficientnet"):
            raise ValueError(f"fine_tune_blocks applies to EfficientNet-Lite backbones only (backbone "
                             f"{self.backbone!r} trains in full), got {self.fine_tune_blocks}")
        check_choice("attend_with", self.attend_with, ATTEND_WITH)
        if isinstance(self.attention_reg, bool) or not isinstance(self.attention_reg, (int, float)) \
                or self.attention_reg < 0:
            raise ValueError(f"attention_reg must be a float >= 0, got {self.attention_reg!r}")
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            value = getattr(self, name)
            if value is None and name == "unk_id":
                continue
            check_positive_int(name, value, allow_zero=True)
            if value >= self.vocab_size:
                raise ValueError(f"{name} must be < vocab_size={self.vocab_size}, got {value}")
