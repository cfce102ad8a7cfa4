"""Translation: training a sequence-to-sequence Transformer (``translation``), its settings (``settings``), and
its run folder and :class:`~attnkit.train.tasks.translate.translation_run.Translator` (``translation_run``),
``attnkit translate`` (``command``)."""

from attnkit.train.registry import Task, TaskCommand, register_task

MODEL_NAME = "seq2seq"
"""The ``model_name`` of a translation run's config.json."""

TASK = register_task(Task(
    "translate", "sequence-to-sequence translation", lambda config: config.get("model_name") == MODEL_NAME,
    "attnkit.train.tasks.translate.translation_run:load_translation_run", "attnkit translate",
    settings="attnkit.train.tasks.translate.settings:TranslationSettings",
    train="attnkit.train.tasks.translate.translation:train_translation_run",
    serve="attnkit.train.tasks.translate.served:ServedTranslator",
    commands={"translate": TaskCommand("attnkit.train.tasks.translate.command:TranslateCommand",
                                       "attnkit.train.tasks.translate.command:translate_command")}))
