"""Image captioning with soft attention over image regions (Xu et al., 2015,
"Show, Attend and Tell: Neural Image Caption Generation with Visual Attention").

A CNN turns the image into a grid of ``R = h·w`` region vectors ``a_i`` (no
pooling: the grid is what the decoder looks at). An LSTM writes the caption one
word at a time; before each word it scores every region with additive
attention on its previous state and reads a gated weighted mean of them::

    e_ti   = v^T tanh(W_h h_{t-1} + W_a a_i + b)           additive attention
    α_t    = softmax_i(e_t)                                   Σ_i α_ti = 1
    β_t    = σ(f_β(h_{t-1}))                                  gating scalar (paper §4.2.1)
    ẑ_t    = β_t Σ_i α_ti a_i
    h_t, c_t = LSTM([E y_{t-1}; ẑ_t], (h_{t-1}, c_{t-1}))
    p(y_t) = softmax(L_o(E y_{t-1} + L_h h_t + L_z ẑ_t))      deep output (paper eq. 7)

``h_0`` and ``c_0`` come from the mean region through two small layers.
With ``attend_with="current_state"`` (the default) the order changes as in the spatial
attention model of Lu et al. (2017, "Knowing When to Look"): the LSTM first
reads ``[E y_{t-1}; mean_i a_i]``, then attention is queried with ``h_t`` and
``ẑ_t`` feeds only the output layer, so the decoder cannot carry what it saw
for one word over to the next and must look again. The
loss is the word cross-entropy plus the *doubly stochastic* regulariser
``λ Σ_i (1 − Σ_t α_ti)²`` that asks every region to receive, over the whole
caption, about one unit of attention. Deviation from the paper: the
regulariser is averaged over the regions (and the cross-entropy over the
words) so that ``λ`` does not depend on the grid size or caption length.

Encoders: ``"small"``, a built-in 3-stage CNN (stride 8) that also sees two
coordinate channels (CoordConv, Liu et al., 2018) so that regions know where
they are; or a torchvision ResNet (``"resnet18"`` ... ``"resnet152"``, stride
32) without its pooling and classifier, imported only when asked for.
Pretrained backbone weights come only from a local file
(:func:`load_backbone_weights`).

Shape legend: B batch, S image side, C region width, R = h·w regions, T caption
length (with ``<bos>``/``<eos>``), V vocabulary, Hd LSTM width.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.layers.additive import AdditiveAttention
from attnkit.models.config import ModelConfig, check_choice, check_fraction, check_positive_int

__all__ = [
    "ATTEND_WITH",
    "BACKBONES",
    "CaptionerConfig",
    "CaptionerOutput",
    "GeneratedCaption",
    "ImageCaptioner",
    "SmallCNN",
    "load_backbone_weights",
]

# name -> width of the last feature map (None: the built-in CNN, width from the config).
BACKBONES: dict[str, int | None] = {
    "small": None, "resnet18": 512, "resnet34": 512, "resnet50": 2048, "resnet101": 2048,
    "resnet152": 2048,
}
"""Image encoders by name, with their feature channels (None: set by the config)."""
ATTEND_WITH = ("previous_state", "current_state")
"""Which LSTM state queries the attention: the paper's previous one, or the one after reading the word."""
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class CaptionerConfig(ModelConfig):
    """Configuration of :class:`ImageCaptioner` (saved with every checkpoint).

    Args:
        vocab_size: words ``V`` including the special tokens.
        backbone: one of :data:`BACKBONES`.
        image_size: the square input side ``S`` the model expects.
        channels: widths of the built-in CNN's three stages (``"small"`` only).
            The defaults are sized for the generated shapes set; real photos
            want a ResNet backbone or wider stages.
        second_kernel: 1 or 3, the kernel of each stage's second convolution
            in the built-in CNN; it sets how far a region sees (see :class:`SmallCNN`).
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
        pad_id: the id of ``<pad>``.
        bos_id: the id of ``<bos>``.
        eos_id: the id of ``<eos>``.
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
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

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
        check_choice("attend_with", self.attend_with, ATTEND_WITH)
        if isinstance(self.attention_reg, bool) or not isinstance(self.attention_reg, (int, float)) \
                or self.attention_reg < 0:
            raise ValueError(f"attention_reg must be a float >= 0, got {self.attention_reg!r}")
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            check_positive_int(name, value, allow_zero=True)
            if value >= self.vocab_size:
                raise ValueError(f"{name} must be < vocab_size={self.vocab_size}, got {value}")


@dataclass
class CaptionerOutput:
    """Teacher-forced scores for the words after ``<bos>`` and the attention used for each.

    Shape:
        logits ``(B, T-1, V)``; weights ``(B, T-1, R)`` over the R regions (zero rows past
        a caption's end).
    """

    logits: Tensor
    weights: Tensor


@dataclass
class GeneratedCaption:
    """One generated caption: word ``ids`` (no ``<bos>``/``<eos>``), its total log-probability
    ``score``, and the attention used to produce each word.

    Shape:
        weights ``(len(ids), R)`` over the R regions.
    """

    ids: list[int]
    score: float
    weights: Tensor


class SmallCNN(nn.Module):
    """Three stages of a stride-2 3×3 conv and a ``second_kernel`` conv, each with BatchNorm and
    ReLU; the input is RGB plus x, y coordinate channels.

    The receptive field of a region is 15 pixels with ``second_kernel=1`` (a
    region describes its own neighbourhood) and 43 pixels with 3 (it sees
    most of a 48-pixel image, so the decoder need not look where an object is).

    Shape:
        images ``(B, 3, S, S)``; returns ``(B, C, ⌈S/8⌉, ⌈S/8⌉)`` with ``C = channels[-1]``.
    """

    def __init__(self, channels: tuple[int, ...], second_kernel: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = 5  # RGB + two coordinate channels
        k = second_kernel
        for out in channels:
            layers += [nn.Conv2d(width, out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(out),
                       nn.ReLU(inplace=True), nn.Conv2d(out, out, k, padding=k // 2, bias=False),
                       nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            width = out
        self.body = nn.Sequential(*layers)

    def forward(self, images: Tensor) -> Tensor:
        b, _, s_h, s_w = images.shape
        ys = torch.linspace(-1.0, 1.0, s_h, device=images.device, dtype=images.dtype)
        xs = torch.linspace(-1.0, 1.0, s_w, device=images.device, dtype=images.dtype)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")  # (S, S) each
        coords = torch.stack([grid_x, grid_y]).expand(b, 2, s_h, s_w)  # (B, 2, S, S)
        return self.body(torch.cat([images, coords], dim=1))  # (B, C, h, w)


def _resnet(name: str) -> nn.Module:
    """A torchvision ResNet without its average pooling and classifier (random weights)."""
    try:
        models = importlib.import_module("torchvision.models")
    except ImportError:
        raise ImportError(
            f"backbone {name!r} needs torchvision, which is not installed; install torchvision "
            "or use backbone='small'"
        ) from None
    net = getattr(models, name)(weights=None)
    return nn.Sequential(*list(net.children())[:-2])  # (B, C, S/32, S/32)


def _check_images(images: object, size: int) -> Tensor:
    if not isinstance(images, Tensor):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if not images.dtype.is_floating_point:
        raise TypeError(f"images must be a floating tensor in [0, 1], got dtype {images.dtype}")
    if images.dim() != 4 or images.shape[1:] != (3, size, size):
        raise ValueError(f"images must be (B, 3, {size}, {size}) RGB in [0, 1], got shape "
                         f"{tuple(images.shape)}")
    return images


class ImageCaptioner(nn.Module):
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
        self.encoder = SmallCNN(cfg.channels, cfg.second_kernel) if cfg.backbone == "small" else _resnet(cfg.backbone)
        width = BACKBONES[cfg.backbone] or cfg.channels[-1]
        self.feature_dim = width
        self.mean: Tensor
        self.std: Tensor
        self.register_buffer("mean", torch.tensor(_IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(_IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.embed_dim)
        self.init_h = nn.Linear(width, cfg.hidden_dim)
        self.init_c = nn.Linear(width, cfg.hidden_dim)
        self.attention = AdditiveAttention(cfg.hidden_dim, width, cfg.attention_dim)
        self.gate = nn.Linear(cfg.hidden_dim, 1)  # f_β
        self.lstm = nn.LSTMCell(cfg.embed_dim + width, cfg.hidden_dim)
        self.out_h = nn.Linear(cfg.hidden_dim, cfg.embed_dim)  # L_h
        self.out_z = nn.Linear(width, cfg.embed_dim)  # L_z
        self.out = nn.Linear(cfg.embed_dim, cfg.vocab_size)  # L_o
        self.drop = nn.Dropout(cfg.dropout)
        with torch.no_grad():
            was_training = self.encoder.training
            self.encoder.eval()
            probe = self.encoder(torch.zeros(1, 3, cfg.image_size, cfg.image_size))
            self.encoder.train(was_training)
        self.grid: tuple[int, int] = (int(probe.shape[-2]), int(probe.shape[-1]))

    # --- pieces ----------------------------------------------------------------------------------

    def encode(self, images: Tensor) -> Tensor:
        """Region features ``a_i``, row by row (region ``i`` is grid cell ``(i // w, i % w)``).

        Shape:
            images ``(B, 3, S, S)``; returns ``(B, R, C)``.
        """
        images = _check_images(images, self.config.image_size)
        grid = self.encoder((images - self.mean) / self.std)  # (B, C, h, w)
        return grid.flatten(2).transpose(1, 2)  # (B, R, C)

    def _start(self, features: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        mean = features.mean(dim=1)  # (B, C)
        h, c = torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean))  # (B, Hd) each
        return h, c, self.attention.project_keys(features)  # (B, R, A)

    def _step(self, prev: Tensor, h: Tensor, c: Tensor, features: Tensor,
              projected: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One word: attend, gate, update the LSTM, score the vocabulary (order per ``attend_with``).

        Shape:
            prev ``(B,)`` ids; h, c ``(B, Hd)``; returns logits ``(B, V)``,
            weights ``(B, R)``, new h, c.
        """
        emb = self.embed(prev)  # (B, E)
        if self.config.attend_with == "previous_state":
            context, alpha = self.attention(h, features, projected_keys=projected)  # (B, C), (B, R)
            z = torch.sigmoid(self.gate(h)) * context  # (B, C): β_t ẑ_t
            h, c = self.lstm(torch.cat([emb, z], dim=-1), (h, c))  # (B, Hd) each
        else:  # "current_state": read the word and the whole image first, then look
            h, c = self.lstm(torch.cat([emb, features.mean(dim=1)], dim=-1), (h, c))  # (B, Hd) each
            context, alpha = self.attention(h, features, projected_keys=projected)  # (B, C), (B, R)
            z = torch.sigmoid(self.gate(h)) * context  # (B, C)
        logits = self.out(self.drop(emb + self.out_h(h) + self.out_z(z)))  # (B, V)
        return logits, alpha, h, c

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
        features = self.encode(images)  # (B, R, C)
        captions, lengths = self._check_captions(captions, lengths, features.shape[0])
        h, c, projected = self._start(features)
        steps = int(lengths.max()) - 1
        logits, weights = [], []
        for t in range(steps):
            step_logits, alpha, h, c = self._step(captions[:, t], h, c, features, projected)
            logits.append(step_logits)
            weights.append(alpha)
        live = torch.arange(steps, device=lengths.device)[None, :] < (lengths[:, None] - 1)  # (B, T-1)
        stacked = torch.stack(weights, dim=1) * live[..., None].to(features.dtype)  # (B, T-1, R)
        return CaptionerOutput(torch.stack(logits, dim=1), stacked)  # (B, T-1, V), (B, T-1, R)

    def loss(self, images: Tensor, captions: Tensor, lengths: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Mean word cross-entropy + ``λ · mean_b mean_i (1 − Σ_t α_ti)²``.

        Returns the scalar loss and its parts (``nll``, ``attention_reg``) as floats.
        """
        out = self(images, captions, lengths)
        steps = out.logits.shape[1]
        targets = captions[:, 1 : steps + 1].long()  # (B, T-1)
        live = torch.arange(steps, device=targets.device)[None, :] < (lengths[:, None] - 1)  # (B, T-1)
        nll = F.cross_entropy(out.logits[live], targets[live])
        reg = ((1.0 - out.weights.sum(dim=1)) ** 2).mean()  # (B, R) -> scalar
        total = nll + self.config.attention_reg * reg
        return total, {"nll": float(nll.detach()), "attention_reg": float(reg.detach())}

    # --- generation ------------------------------------------------------------------------------

    def _max_len(self, max_len: int | None) -> int:
        return self.config.max_len if max_len is None else check_positive_int("max_len", max_len)

    @torch.no_grad()
    def greedy(self, images: Tensor, *, max_len: int | None = None) -> list[GeneratedCaption]:
        """The most likely word at every step, for a batch of images.

        Stops each caption at ``<eos>`` or after ``max_len`` words (``<eos>`` included).

        Shape:
            images ``(B, 3, S, S)``; returns B captions with weights ``(n_words, R)``.
        """
        limit = self._max_len(max_len)
        features = self.encode(images)  # (B, R, C)
        b = features.shape[0]
        h, c, projected = self._start(features)
        prev = torch.full((b,), self.config.bos_id, dtype=torch.long, device=features.device)
        ids, weights, scores = [], [], []
        for _ in range(limit):
            logits, alpha, h, c = self._step(prev, h, c, features, projected)
            logp = torch.log_softmax(logits.float(), dim=-1)  # (B, V)
            prev = logp.argmax(dim=-1)  # (B,)
            ids.append(prev)
            weights.append(alpha)
            scores.append(logp.gather(1, prev[:, None])[:, 0])
        all_ids = torch.stack(ids, 1).tolist()  # (B, L)
        all_w = torch.stack(weights, 1)  # (B, L, R)
        all_s = torch.stack(scores, 1)  # (B, L)
        results = []
        for i in range(b):
            row = all_ids[i]
            end = row.index(self.config.eos_id) if self.config.eos_id in row else len(row)
            stop = min(end + 1, len(row))  # the <eos> step's probability counts in the score
            results.append(GeneratedCaption(row[:end], float(all_s[i, :stop].sum()), all_w[i, :end]))
        return results

    @torch.no_grad()
    def beam_search(self, images: Tensor, *, beam_size: int = 3, max_len: int | None = None,
                    length_penalty: float = 0.0) -> list[GeneratedCaption]:
        """Keep the ``beam_size`` best partial captions at each step (per image).

        A hypothesis that emits ``<eos>`` is finished and leaves the beam, which
        narrows; search ends when none is left or after ``max_len`` steps. The
        best finished hypothesis by ``score / len^length_penalty`` wins
        (``length_penalty=0``: the plain sum of log-probabilities, so
        ``beam_size=1`` is exactly :meth:`greedy`).

        Shape:
            images ``(B, 3, S, S)``; returns B captions with weights ``(n_words, R)``.
        """
        k = check_positive_int("beam_size", beam_size)
        limit = self._max_len(max_len)
        features = self.encode(images)  # (B, R, C)
        return [self._beam_one(features[i : i + 1], k, limit, float(length_penalty))
                for i in range(features.shape[0])]

    def _beam_one(self, features: Tensor, k: int, limit: int, penalty: float) -> GeneratedCaption:
        h, c, projected = self._start(features)  # (1, Hd), (1, Hd), (1, R, A)
        r = features.shape[1]
        prev = torch.tensor([self.config.bos_id], device=features.device)
        scores = torch.zeros(1, device=features.device)
        paths: list[list[int]] = [[]]
        alphas = features.new_zeros(1, 0, r)  # (beams, steps, R)
        finished: list[tuple[float, GeneratedCaption]] = []
        for step in range(limit):
            n = prev.shape[0]
            logits, alpha, h, c = self._step(prev, h, c, features.expand(n, -1, -1),
                                             projected.expand(n, -1, -1))
            total = scores[:, None] + torch.log_softmax(logits.float(), dim=-1)  # (n, V)
            best, flat = total.flatten().topk(min(k, total.numel()))
            src, word = flat // total.shape[1], flat % total.shape[1]
            alphas = torch.cat([alphas[src], alpha[src, None]], dim=1)  # (k, step+1, R)
            keep = []
            for j in range(len(src)):
                ids = [*paths[int(src[j])], int(word[j])]
                done = int(word[j]) == self.config.eos_id
                if done or step == limit - 1:
                    words = ids[:-1] if done else ids
                    cap = GeneratedCaption(words, float(best[j]), alphas[j, : len(words)])
                    finished.append((float(best[j]) / max(len(ids), 1) ** penalty, cap))
                else:
                    keep.append(j)
            if not keep:
                break
            sel = torch.tensor(keep, device=features.device)
            paths = [[*paths[int(src[j])], int(word[j])] for j in keep]
            prev, scores, alphas = word[sel], best[sel], alphas[sel]
            h, c = h[src[sel]], c[src[sel]]
            k = len(keep)
        return max(finished, key=lambda item: item[0])[1]

    def attention_maps(self, weights: Tensor) -> Tensor:
        """Per-word attention as image-shaped maps: ``(T, R) -> (T, h, w)`` (row-major regions)."""
        h, w = self.grid
        if weights.dim() != 2 or weights.shape[1] != h * w:
            raise ValueError(f"weights must be (T, R={h * w}), got shape {tuple(weights.shape)}")
        return weights.reshape(-1, h, w)  # (T, h, w)


def load_backbone_weights(model: ImageCaptioner, path: str | Path) -> list[str]:
    """Load pretrained encoder weights from a local file into ``model.encoder``.

    ``.safetensors`` files are read with safetensors, anything else with
    ``torch.load(weights_only=True)`` (never unpickling arbitrary objects). A
    torchvision ResNet checkpoint fits as it is: its classifier (``fc.*``) is
    dropped and the numbered children of the truncated network are matched by
    name. Returns the names of the file's tensors that were not used.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"backbone weights file {path} does not exist")
    state = _read_weights_file(path)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ValueError(f"{path} must hold a dict of tensors, got {type(state).__name__}")
    own = model.encoder.state_dict()
    # torchvision names (conv1, bn1, layer1..4) -> positions in the truncated Sequential.
    order = ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4"]
    renamed: dict[str, Tensor] = {}
    unused: list[str] = []
    for name, tensor in state.items():
        if not isinstance(tensor, Tensor):
            unused.append(str(name))
            continue
        head, _, rest = name.partition(".")
        key = f"{order.index(head)}.{rest}" if head in order else name
        key = key if key in own else name
        if key in own:
            renamed[key] = tensor
        else:
            unused.append(name)
    missing = sorted(set(own) - set(renamed))
    if missing:
        raise ValueError(f"{path} does not fit backbone {model.config.backbone!r}: missing {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}")
    model.encoder.load_state_dict(renamed)
    return unused


def _read_weights_file(path: Path) -> Any:
    """The contents of a safetensors file or of a ``torch.save`` file holding only tensors.

    Nothing is unpickled beyond what ``torch.load(weights_only=True)`` allows;
    any failure becomes a ValueError naming the file, without torch's advice
    to load it unsafely.
    """
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as err:  # safetensors raises its own SafetensorError
            raise ValueError(f"{path} is not a readable safetensors file (damaged or truncated): "
                             f"{_first_sentence(err)}") from None
    import pickle

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        if found is None:
            raise ValueError(f"{path} is not a weights file attnkit can read: not a safetensors file, and "
                             "not a torch.save file holding only tensors (damaged, truncated or another "
                             "format)") from None
        raise ValueError(
            f"{path} holds objects other than tensors ({found.group(1)}); attnkit never unpickles "
            "arbitrary objects. If you trust the file, convert its tensors to safetensors and pass "
            "the new file:\n"
            "    import torch; from safetensors.torch import save_file\n"
            f"    state = torch.load({str(path)!r}, map_location='cpu', weights_only=False)\n"
            "    save_file({k: v.contiguous() for k, v in state.get('state_dict', state).items() "
            f"if isinstance(v, torch.Tensor)}}, {str(path.with_suffix('.safetensors'))!r})"
        ) from None
    except (RuntimeError, EOFError, OSError) as err:
        reason = _first_sentence(err) or "the file is empty or ends early"
        raise ValueError(f"{path} is not a readable weights file (damaged or truncated): {reason}") from None


def _first_sentence(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text.split(". ")[0].rstrip(".")
