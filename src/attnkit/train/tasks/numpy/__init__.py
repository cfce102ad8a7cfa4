"""``attnkit train --backend numpy``: the NumPy twin's classifiers trained, saved and served (``numpy_backend``)."""
