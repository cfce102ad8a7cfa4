"""Region features of a frozen image encoder, computed once and kept on disk.

A cache is a folder::

    manifest.json              {"encoder": ..., "image_size": ..., "weights": ..., "grid": [R, C],
                                "shards": {"shard-00000.safetensors": [image names], ...},
                                "encode_seconds": time spent encoding, all shards together}
    shard-00000.safetensors    float16 (R, C) region features, one tensor per image name

The ``encoder`` key names the backbone and ``weights`` a digest of its weights
(:func:`encoder_key`); a cache holding features of another encoder, weights or
image size is refused by name (:class:`FeatureCacheError`), never mixed. Shards
are written whole (a temporary file renamed into place) before the manifest
names them, so an interrupted encoding keeps what was finished and the next
run encodes only the rest.

Shape legend: N images, R regions, C region width.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

    from attnkit.models.captioning import CaptionEnsemble, ImageCaptioner

__all__ = ["FeatureCache", "FeatureCacheError", "encoder_key", "encode_to_cache"]

_MANIFEST = "manifest.json"


class FeatureCacheError(ValueError):
    """A feature cache that does not belong to the requested encoder, or a damaged one; names the folder."""


def encoder_key(model: ImageCaptioner | CaptionEnsemble) -> dict[str, Any]:
    """What a cache must match: backbone name, image size, region grid and a digest of the encoder weights."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.encoder.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
    h, w = model.grid
    return {"encoder": model.config.backbone, "image_size": model.config.image_size,
            "weights": digest.hexdigest()[:16], "grid": [h * w, model.feature_dim]}


class FeatureCache:
    """A folder of cached region features for one encoder key (see the module doc)."""

    def __init__(self, directory: str | Path, key: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.key = dict(key)
        self.shards: dict[str, list[str]] = {}
        self.seconds = 0.0  # encoding time of the cached shards
        manifest = self.directory / _MANIFEST
        if manifest.is_file():
            try:
                saved = json.loads(manifest.read_text(encoding="utf-8"))
                shards = saved["shards"]
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as err:
                raise FeatureCacheError(f"{manifest} is not a feature-cache manifest: {err}") from None
            theirs = {k: saved.get(k) for k in self.key}
            if theirs != self.key:
                raise FeatureCacheError(
                    f"feature cache {self.directory} holds features of encoder {theirs['encoder']!r} at "
                    f"{theirs['image_size']} px (weights {theirs['weights']}), not of {self.key['encoder']!r} at "
                    f"{self.key['image_size']} px (weights {self.key['weights']}); use another folder")
            self.shards = {str(k): [str(n) for n in v] for k, v in shards.items()}
            self.seconds = float(saved.get("encode_seconds", 0.0))
        elif self.directory.exists() and any(self.directory.iterdir()):
            raise FeatureCacheError(f"{self.directory} is not empty and holds no {_MANIFEST}: not a feature cache")

    def names(self) -> set[str]:
        """The image names whose features are cached."""
        return {n for names in self.shards.values() for n in names}

    def add(self, features: dict[str, Tensor], *, seconds: float = 0.0) -> None:
        """Write ``{image name: (R, C) features}`` as one new float16 shard, then name it in the manifest
        (``seconds``: the time spent encoding them, added to the manifest's ``encode_seconds``)."""
        from safetensors.torch import save_file

        if not features:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        shard = f"shard-{len(self.shards):05d}.safetensors"
        tmp = self.directory / f".{shard}.tmp"
        save_file({n: t.detach().to("cpu").half().contiguous() for n, t in features.items()}, str(tmp),
                  metadata={"encoder": str(self.key["encoder"]), "image_size": str(self.key["image_size"])})
        os.replace(tmp, self.directory / shard)
        self.shards[shard] = sorted(features)
        self.seconds += seconds
        tmp = self.directory / f".{_MANIFEST}.tmp"
        tmp.write_text(json.dumps({**self.key, "shards": self.shards, "encode_seconds": round(self.seconds, 1)},
                                  indent=1), encoding="utf-8")
        os.replace(tmp, self.directory / _MANIFEST)

    def load(self, names: Sequence[str]) -> Tensor:
        """The cached features of ``names``, in that order, as float16.

        Shape:
            returns ``(N, R, C)`` with ``N = len(names)``.
        """
        import torch
        from safetensors import safe_open

        where = {n: shard for shard, ns in self.shards.items() for n in ns}
        lost = [n for n in names if n not in where]
        if lost:
            raise FeatureCacheError(f"feature cache {self.directory} lacks {len(lost)} image(s), e.g. {lost[0]!r}")
        r, c = self.key["grid"]
        out = torch.empty(len(names), r, c, dtype=torch.float16)  # (N, R, C)
        by_shard: dict[str, list[int]] = {}
        for i, n in enumerate(names):
            by_shard.setdefault(where[n], []).append(i)
        for shard, rows in by_shard.items():
            try:
                with safe_open(str(self.directory / shard), framework="pt") as f:
                    for i in rows:
                        out[i] = f.get_tensor(names[i])
            except Exception as err:  # safetensors raises its own SafetensorError
                raise FeatureCacheError(f"{self.directory / shard} is damaged: {err}") from None
        return out


def encode_to_cache(model: ImageCaptioner | CaptionEnsemble, paths: Sequence[Path], cache: FeatureCache, *,
                    read: Callable[[Path, int], np.ndarray], batch_size: int = 32, shard_size: int = 1024,
                    progress: bool = True) -> int:
    """Encode the images of ``paths`` not yet in ``cache`` (keyed by file name), with a progress bar.

    ``read(path, size)`` gives ``(S, S, 3)`` uint8 pixels. Returns how many images were encoded.
    """
    import time

    import torch

    from attnkit._progress import progress as progress_bar
    from attnkit.data.captions import images_to_tensor

    if not getattr(model.encoder, "frozen", False):
        raise ValueError(f"only a frozen encoder's features can be cached; backbone {model.config.backbone!r} "
                         "is trained with the captioner")
    have = cache.names()
    todo = [p for p in dict.fromkeys(paths) if p.name not in have]
    model.eval()
    pending: dict[str, Tensor] = {}
    clock = time.perf_counter()
    with torch.inference_mode(), progress_bar(len(todo), "encoding images", unit="img",
                                              enabled=progress) as bar:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start:start + batch_size]
            pixels = images_to_tensor([read(p, model.config.image_size) for p in chunk])
            for p, f in zip(chunk, model.encode(pixels), strict=True):  # (R, C) each
                pending[p.name] = f.clone()
            bar.update(len(chunk))
            if len(pending) >= shard_size:
                cache.add(pending, seconds=time.perf_counter() - clock)
                pending, clock = {}, time.perf_counter()
        cache.add(pending, seconds=time.perf_counter() - clock)
    return len(todo)
