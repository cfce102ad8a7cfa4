"""The one training loop (``trainer``), the interface a task gives it and its batches (``task``), the
learning-rate schedules (``schedules``) and data-parallel processes (``distributed``)."""
