"""Image captioning: training and serving (``captioning``), its data (``caption_data``), settings
(``caption_settings``), memory plan (``caption_memory``), cached encoder features (``feature_cache``) and
``attnkit caption`` (``command``)."""

from attnkit.train.registry import Task, TaskCommand, register_task

__all__ = ["MODEL_NAME", "TASK"]

MODEL_NAME = "captioner"
"""The ``model_name`` of a captioning run's config.json."""


TASK = register_task(Task(
    "caption", "image captioning", lambda config: config.get("model_name") == MODEL_NAME,
    "attnkit.train.tasks.caption.captioning:CaptionRun.load", "attnkit caption",
    settings="attnkit.train.tasks.caption.caption_settings:CaptionSettings",
    train="attnkit.train.tasks.caption.captioning:train_caption_run",
    serve="attnkit.train.tasks.caption.served:ServedCaptioner",
    commands={"caption": TaskCommand("attnkit.train.tasks.caption.command:CaptionCommand",
                                     "attnkit.train.tasks.caption.command:caption_command")}))
