"""Explanations of a text classifier's predictions and how faithful they are.

* :mod:`attnkit.attribution.methods` -- token attributions by several methods
  side by side: exact contributions, raw attention, attention x value norm,
  rollout, gradient x input, integrated gradients, gradient-weighted
  attention relevance.
* :mod:`attnkit.attribution.hf` -- :class:`HFClassifier`: a Hugging Face
  sequence classifier explained the same way, through :func:`attnkit.inspect.capture`.
* :mod:`attnkit.attribution.faithfulness` -- comprehensiveness and
  sufficiency (DeYoung et al., 2020, ERASER) as AOPC, beside a random-order
  control, and the words that moved the decision most per class.
"""

from __future__ import annotations

from attnkit.attribution.faithfulness import (
    PERCENTS,
    aopc,
    erasure_counts,
    faithfulness,
)
from attnkit.attribution.hf import HFClassifier
from attnkit.attribution.methods import (
    IG_STEPS,
    METHOD_NAMES,
    METHODS,
    MethodNotApplicable,
    applicable_methods,
    attribute,
    is_exact,
    method_list,
)

__all__ = ["HFClassifier", "METHODS", "METHOD_NAMES", "IG_STEPS", "MethodNotApplicable", "applicable_methods",
           "attribute", "is_exact", "method_list", "PERCENTS", "aopc", "erasure_counts", "faithfulness"]
