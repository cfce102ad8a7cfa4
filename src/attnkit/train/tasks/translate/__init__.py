"""Translation: training a sequence-to-sequence Transformer (``translation``) and its run folder and
:class:`~attnkit.train.tasks.translate.translation_run.Translator` (``translation_run``)."""
