"""The run folder: generations committed as one transaction (``rundir``), one writer (``runlock``), atomic file
operations (``fileops``), checkpoints and resumable state (``checkpoint``, ``train_state``, ``tensors``), the
checks a load makes (``run_files``) and the one pipeline every task starts and commits a run through (``run``)."""
