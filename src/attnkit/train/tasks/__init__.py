"""One folder per task: ``classify`` (the text classifiers, their recipe, baseline and serving), ``translate``,
``caption`` and ``numpy`` (the NumPy twin's classifiers). Each registers its kind of run in
:mod:`attnkit.train.registry`."""
