"""The image captioner: a region-grid encoder and the attending LSTM decoder, trained with
teacher forcing and the doubly stochastic attention regulariser (Xu et al., 2015).

The loss is the word cross-entropy plus ``λ Σ_i (1 − Σ_t α_ti)²``, which asks
every region to receive, over the whole caption, about one unit of attention.
Deviation from the paper: the regulariser is averaged over the regions (and
the cross-entropy over the words) so that ``λ`` does not depend on the grid
size or caption length.

Shape legend: B batch, S image side, C region width, R = h·w regions, T caption
length (with ``<bos>``/``<eos>``), V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit._modes import eval_mode
from attnkit.models.captioning.config import CaptionerConfig
from attnkit.models.captioning.decoder import SoftAttentionDecoder
from attnkit.models.captioning.encoder import build_encoder, check_images, normalisation

__all__ = ["CaptionerOutput", "ImageCaptioner"]


@dataclass
class CaptionerOutput:
    """Teacher-forced scores for the words after ``<bos>`` and the attention used for each.

    Shape:
        logits ``(B, T-1, V)``; weights ``(B, T-1, R)`` over the R regions (zero rows past
        a caption's end).
    """

    logits: Tensor
    weights: Tensor


class ImageCaptioner(SoftAttentionDecoder):
    """Show, Attend and Tell: a region-grid CNN encoder and an attending LSTM decoder.

    Call it with images and teacher-forced captions for training
    (:meth:`forward`, :meth:`loss`); generate with :meth:`greedy` or
    :meth:`beam_search`; turn a caption's weights into per-word maps with
    :meth:`attention_maps`.

    Shape:
        images ``(B, 3, S, S)`` float in ``[0, 1]``; captions ``(B, T)`` ids that
        start with ``<bos>``; lengths ``(B,)`` counting ``<bos>`` and ``<eos>``.
    """

    def __init__(self, config: CaptionerConfig) -> None:
        super().__init__()
        if not isinstance(config, CaptionerConfig):
            raise TypeError(f"config must be a CaptionerConfig, got {type(config).__name__}")
        self.config = cfg = config
        self.encoder, width = build_encoder(cfg.backbone, cfg.channels, cfg.second_kernel, cfg.fine_tune_blocks)
        self.feature_dim = width
        self.mean: Tensor
        self.std: Tensor
        mean, std = normalisation(cfg.backbone)
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1), persistent=False)
        self.build_decoder(cfg, width)  # after the encoder: parameter order as in every saved run
        with torch.no_grad(), eval_mode(self.encoder):
            probe = self.encoder(torch.zeros(1, 3, cfg.image_size, cfg.image_size))
        self.grid: tuple[int, int] = (int(probe.shape[-2]), int(probe.shape[-1]))

    def encode(self, images: Tensor) -> Tensor:
        """Region features ``a_i``, row by row (region ``i`` is grid cell ``(i // w, i % w)``).

        Shape:
            images ``(B, 3, S, S)``; returns ``(B, R, C)``.
        """
        images = check_images(images, self.config.image_size)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not getattr(self.encoder, "frozen", False)):
            grid = self.encoder((images - self.mean) / self.std)  # (B, C, h, w)
        return grid.flatten(2).transpose(1, 2)  # (B, R, C)

    def check_features(self, features: object) -> Tensor:
        """``features`` as float32 if they are ``(B, R, C)`` region vectors of this model's encoder.

        Shape:
            features ``(B, R, C)`` with ``R = h·w`` of :attr:`grid` and ``C`` the encoder width.
        """
        h, w = self.grid
        if not isinstance(features, Tensor) or not features.dtype.is_floating_point:
            raise TypeError(f"features must be a floating torch.Tensor, got {type(features).__name__}")
        if features.dim() != 3 or features.shape[1:] != (h * w, self.feature_dim):
            raise ValueError(f"features must be (B, R={h * w}, C={self.feature_dim}) regions of backbone "
                             f"{self.config.backbone!r}, got shape {tuple(features.shape)}")
        return features.float()

    def _check_captions(self, captions: object, lengths: object, b: int) -> tuple[Tensor, Tensor]:
        if not isinstance(captions, Tensor) or not isinstance(lengths, Tensor):
            raise TypeError("captions and lengths must be torch.Tensors, got "
                            f"{type(captions).__name__} and {type(lengths).__name__}")
        if captions.dim() != 2 or captions.shape[0] != b or captions.shape[1] < 2 \
                or captions.dtype.is_floating_point:
            raise ValueError(f"captions must be integer (B, T) ids with B={b}, T >= 2, got "
                             f"{captions.dtype} {tuple(captions.shape)}")
        if lengths.shape != (b,) or lengths.dtype.is_floating_point:
            raise ValueError(f"lengths must be integer (B,) = ({b},), got {lengths.dtype} {tuple(lengths.shape)}")
        if int(lengths.min()) < 2 or int(lengths.max()) > captions.shape[1]:
            raise ValueError(f"lengths must lie in [2, T={captions.shape[1]}] (<bos> and <eos> "
                             f"included), got {lengths.tolist()}")
        if int(captions.min()) < 0 or int(captions.max()) >= self.config.vocab_size:
            raise ValueError(f"captions must hold ids in [0, {self.config.vocab_size}), got "
                             f"{int(captions.min())}..{int(captions.max())}")
        return captions.long(), lengths.long()

    # --- training --------------------------------------------------------------------------------

    def forward(self, images: Tensor, captions: Tensor, lengths: Tensor) -> CaptionerOutput:
        """Teacher forcing: step ``t`` reads the true word ``y_{t-1}`` and scores ``y_t``.

        Shape:
            images ``(B, 3, S, S)``, captions ``(B, T)``, lengths ``(B,)``; returns
            logits ``(B, T-1, V)`` and weights ``(B, T-1, R)`` (zero past each caption's end).
        """
        return self.forward_features(self.encode(images), captions, lengths)

    def forward_features(self, features: Tensor, captions: Tensor, lengths: Tensor) -> CaptionerOutput:
        """:meth:`forward` on region features already encoded (a frozen encoder's cache).

        Shape:
            features ``(B, R, C)``, captions ``(B, T)``, lengths ``(B,)``; returns as :meth:`forward`.
        """
        features = self.check_features(features)
        captions, lengths = self._check_captions(captions, lengths, features.shape[0])
        steps = int(lengths.max()) - 1
        logits, weights = self._teacher_forced(features, captions, steps)  # (B, T-1, V), (B, T-1, R)
        live = torch.arange(steps, device=lengths.device)[None, :] < (lengths[:, None] - 1)  # (B, T-1)
        return CaptionerOutput(logits, weights * live[..., None].to(features.dtype))

    def loss(self, images: Tensor, captions: Tensor, lengths: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Mean word cross-entropy + ``λ · mean_b mean_i (1 − Σ_t α_ti)²``.

        Returns the scalar loss and its parts (``nll``, ``attention_reg``) as floats.
        """
        return self.loss_features(self.encode(images), captions, lengths)

    def loss_features(self, features: Tensor, captions: Tensor, lengths: Tensor) -> tuple[Tensor, dict[str, float]]:
        """:meth:`loss` on region features already encoded ``(B, R, C)``."""
        out = self.forward_features(features, captions, lengths)
        steps = out.logits.shape[1]
        targets = captions[:, 1 : steps + 1].long()  # (B, T-1)
        live = torch.arange(steps, device=targets.device)[None, :] < (lengths[:, None] - 1)  # (B, T-1)
        nll = F.cross_entropy(out.logits[live], targets[live])
        reg = ((1.0 - out.weights.sum(dim=1)) ** 2).mean()  # (B, R) -> scalar
        total = nll + self.config.attention_reg * reg
        return total, {"nll": float(nll.detach()), "attention_reg": float(reg.detach())}
