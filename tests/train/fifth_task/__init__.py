"""A fifth task, as a user adds one: this folder only (``tests/train/test_tasks.py`` copies it into the
task folders of ``attnkit.train.tasks`` and edits no other file). It registers itself, on the registry's
terms: a settings tree, a train function, a test that claims its runs and a loader."""

from attnkit.train.registry import Task, register_task

MODEL_NAME = "word-counter"

TASK = register_task(Task(
    "count", "word counting", lambda config: config.get("model_name") == MODEL_NAME,
    f"{__name__}.train:load_counter", "python -c 'import attnkit; attnkit.load_run(RUN)'",
    settings=f"{__name__}.settings:CountSettings", train=f"{__name__}.train:train_counter"))
