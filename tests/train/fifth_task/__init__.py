"""A fifth task, as a user adds one: this folder only (``tests/train/test_tasks.py`` copies it into the
task folders of ``attnkit.train.tasks`` and edits no other file). It registers itself, on the registry's
terms: a settings tree, a train function, a test that claims its runs, a loader and its own command."""

from attnkit.train.registry import Task, TaskCommand, register_task

MODEL_NAME = "word-counter"

TASK = register_task(Task(
    "count", "word counting", lambda config: config.get("model_name") == MODEL_NAME,
    f"{__name__}.train:load_counter", "python -c 'import attnkit; attnkit.load_run(RUN)'",
    settings=f"{__name__}.settings:CountSettings", train=f"{__name__}.train:train_counter",
    commands={"weigh": TaskCommand(f"{__name__}.command:WeighCommand", f"{__name__}.command:weigh")}))
