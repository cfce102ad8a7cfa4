"""A captioning run behind ``attnkit serve``: ``POST /v1/caption`` (the server is :mod:`attnkit.serve`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit.train.tasks.caption.caption_settings import DECODING

__all__ = ["ServedCaptioner"]


class ServedCaptioner:
    """A :class:`~attnkit.train.tasks.caption.captioning.CaptionRun` as the server answers for it: a caption
    per image, as ``attnkit caption`` prints it with the same beam."""

    kind = "caption"
    routes = ("caption", "explain")

    def __init__(self, name: str, path: Path, run: Any) -> None:
        self.name, self.path, self.run = name, path, run

    def info(self) -> dict[str, Any]:
        """``/v1/models``'s entry."""
        return {"name": self.name, "kind": self.kind, "routes": list(self.routes),
                "image_size": self.run.model.config.image_size, "beam_size": DECODING.beam_size,
                "notice": self.run.notice}

    def caption(self, images: Sequence[bytes], beam_size: int = DECODING.beam_size, *,
                max_pixels: int | None = None) -> list[str]:
        """The caption of each image (PNG or JPEG bytes); an image that is not one, or has more than
        ``max_pixels`` pixels, is refused naming it (``images.N``) before any is captioned."""
        from attnkit._checks import FieldError
        from attnkit.data.captions import CaptionFormatError, images_to_tensor, load_image

        size = self.run.model.config.image_size
        pixels = []
        for i, data in enumerate(images):
            try:
                pixels.append(load_image(data, size, max_pixels=max_pixels, name=f"images.{i}"))
            except CaptionFormatError as err:
                raise FieldError(str(err), f"images.{i}") from None
        return [caption or "(empty caption)" for caption in
                self.run.caption(images_to_tensor(pixels), beam_size=beam_size)]

    def explain(self, image: bytes, method: str | None, *, max_pixels: int | None = None) -> dict[str, Any]:
        """The image (PNG or JPEG bytes) captioned and each word explained by the image's regions, every
        method's faithfulness measured on that caption
        (:meth:`~attnkit.train.tasks.caption.captioning.CaptionRun.explain`)."""
        from attnkit._checks import FieldError
        from attnkit.attribution.generation import GENERATION_METHODS
        from attnkit.data.captions import CaptionFormatError, images_to_tensor, load_image

        if method is not None and method not in GENERATION_METHODS:
            raise FieldError(f"method: {method!r} does not apply to a captioning run; it takes "
                             f"{', '.join(GENERATION_METHODS)}", "method")
        try:
            pixels = load_image(image, self.run.model.config.image_size, max_pixels=max_pixels, name="image")
        except CaptionFormatError as err:
            raise FieldError(str(err), "image") from None
        return {"model": self.name, **self.run.explain(images_to_tensor(pixels[None]), method=method)}
