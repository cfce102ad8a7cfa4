"""One benchmark figure: two sides measured in the same run, their ratio and the target.

A :class:`Result` always compares side ``a`` (attnkit) with side ``b`` (the
baseline), ``ratio = a / b``, and judges the ratio against a bound
(``ratio <= bound`` for times and memory, ``ratio >= bound`` for rates).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Sense = Literal["<=", ">="]
Status = Literal["PASS", "MISS", "INFO", "N/A"]

__all__ = ["Result", "judge", "unavailable", "completed", "format_result"]


@dataclass(frozen=True)
class Result:
    """One measured comparison.

    Attributes:
        case: the case name (one of :data:`attnkit.bench.CASES`).
        check: what is measured, e.g. ``"forward+backward time"``.
        a_label, b_label: what sides ``a`` and ``b`` ran.
        a, b: the measured values (``None`` when the case could not run).
        unit: unit of ``a`` and ``b`` (``"s"``, ``"MiB"``, ``"GFLOP/s"``).
        ratio: ``a / b``.
        sense, bound: the target is ``ratio <sense> bound``; ``bound`` is
            ``None`` for context figures that carry no target.
        status: ``PASS``/``MISS`` against the target, ``INFO`` for context
            figures, ``N/A`` when the case could not run (``note`` says why).
        method: how the figures were measured.
        params: the sizes used.
        note: anything else worth knowing.
        goal: a target that is not a ratio bound (e.g. ``"completes"``).
    """

    case: str
    check: str
    a_label: str
    b_label: str
    a: float | None
    b: float | None
    unit: str
    ratio: float | None
    sense: Sense
    bound: float | None
    status: Status
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    goal: str = ""

    @property
    def target(self) -> str:
        """The target as text, e.g. ``"a/b <= 1.05"``."""
        if self.bound is None:
            return self.goal or "no target (context)"
        return f"a/b {self.sense} {self.bound:g}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (with ``target`` spelled out)."""
        return {**asdict(self), "target": self.target}


def judge(
    case: str, check: str, a_label: str, a: float, b_label: str, b: float, *, unit: str,
    sense: Sense, bound: float | None, method: str, params: dict[str, Any] | None = None,
    note: str = "",
) -> Result:
    """Build a :class:`Result` from both measured sides: ``ratio = a / b``, then PASS or MISS."""
    if not b > 0:
        raise ValueError(f"baseline side b must be positive to form a ratio, got {b!r} for {case}")
    ratio = a / b
    if bound is None:
        status: Status = "INFO"
    else:
        ok = ratio <= bound if sense == "<=" else ratio >= bound
        status = "PASS" if ok else "MISS"
    return Result(case, check, a_label, b_label, a, b, unit, ratio, sense, bound, status, method,
                  dict(params or {}), note)


def unavailable(case: str, check: str, a_label: str, b_label: str, *, unit: str, sense: Sense,
                bound: float | None, why: str, params: dict[str, Any] | None = None) -> Result:
    """A :class:`Result` for a case that could not run, saying why."""
    return Result(case, check, a_label, b_label, None, None, unit, None, sense, bound, "N/A",
                  "not measured", dict(params or {}), why)


def _value(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    if unit == "s":
        return f"{x * 1e3:10.1f} ms"
    return f"{x:10.1f} {unit}"


def format_result(r: Result) -> str:
    """Several readable lines: both sides, the ratio, the target and the verdict."""
    sizes = " ".join(f"{k}={v}" for k, v in r.params.items())
    width = max(len(r.a_label), len(r.b_label))
    ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
    lines = [
        f"[{r.case}] {r.check}  ({sizes})",
        f"  a: {r.a_label:<{width}}  {_value(r.a, r.unit)}",
        f"  b: {r.b_label:<{width}}  {_value(r.b, r.unit)}",
        f"  ratio a/b = {ratio}   target: {r.target}   {r.status}",
        f"  method: {r.method}",
    ]
    if r.note:
        lines.append(f"  note: {r.note}")
    return "\n".join(lines)


def completed(case: str, check: str, a_label: str, a: float | None, b_label: str, b: float, *,
              unit: str, method: str, params: dict[str, Any] | None = None, note: str = "") -> Result:
    """A :class:`Result` whose target is that side ``a`` runs to the end.

    ``a`` is its measure (PASS), or ``None`` when it did not finish (MISS;
    ``note`` says why). ``b`` gives scale, e.g. the same measure at a smaller
    size; ``ratio = a / b``.
    """
    if not b > 0:
        raise ValueError(f"reference side b must be positive to form a ratio, got {b!r} for {case}")
    ratio = None if a is None else a / b
    return Result(case, check, a_label, b_label, a, b, unit, ratio, "<=", None,
                  "MISS" if a is None else "PASS", method, dict(params or {}), note, "completes")
