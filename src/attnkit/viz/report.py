"""An interactive attention report: ONE self-contained HTML file that opens
from disk, with no server, no network and no third-party script.

* **Head view** — the query tokens on the left, the key tokens on the right and
  a line for each attention edge, its opacity the weight; hover a token to
  highlight its edges, click to pin it; choose the layer and head.
* **Model view** — a layers × heads grid of small heatmaps; click one to open
  it in the head view. Each thumbnail's tooltip gives the head's entropy.
* **Examples** — a selector for every example of a batch, with its prediction.

Long inputs stay light and readable: each query keeps only its ``top_k``
strongest edges (the share of attention mass they hold is shown), weights are
quantised to 8 bits (steps of 1/255), and thumbnails are block-averaged down to
at most ``thumb_size`` × ``thumb_size`` cells. A 512-token, 6-layer, 12-head
input gives a file of about 1.5 MB.

Safety: token text, titles and predictions only ever reach the page as data.
The data is embedded as JSON in which every ``<``, ``>`` and ``&`` is escaped
(so neither ``</script>`` nor ``<!--`` can end the data block), the page writes
text with ``textContent`` only, and a Content-Security-Policy allows nothing
but the page's own script (by its SHA-256 hash) and styles: no request can
leave the page and no injected handler can run.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnkit.viz._arrays import check_ndim, check_tokens, is_layer_list, stack_layers
from attnkit.viz._neuron_assets import NEURON_CSS, NEURON_JS, NEURON_SECTION
from attnkit.viz._report_assets import CSS, JS, PAGE
from attnkit.viz.measures import attention_entropy

__all__ = ["write_report", "report_data", "ReportLimits", "pad_examples", "ExampleMaps"]

Prediction = str | Mapping[str, Any] | None
Section = Mapping[str, Any]
"""A summary section: ``title``, optional ``text`` (paragraphs), ``columns`` and ``rows`` (a table)."""

_SUMMARY_CSS = ("<style>.summary{padding:8px 20px;background:#fff;border-bottom:1px solid #e3e3e3}"
                ".summary table{border-collapse:collapse;margin:4px 0 8px}.summary td,.summary th{"
                "border:1px solid #ddd;padding:2px 8px;text-align:left}.summary p{margin:2px 0}</style>")


@dataclass(frozen=True)
class ReportLimits:
    """How much of the attention goes into the file.

    ``top_k`` edges are kept per query row (all of them when ``Tk <= top_k``);
    thumbnails have at most ``thumb_size`` cells a side.
    """

    top_k: int = 8
    thumb_size: int = 48

    def __post_init__(self) -> None:
        for name in ("top_k", "thumb_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")


def _b64(arr: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii")


def _block_average(a: np.ndarray, size: int) -> np.ndarray:
    """Average ``(..., Tq, Tk)`` down to at most ``size`` cells along each of the last two axes."""
    for axis in (-2, -1):
        n = a.shape[axis]
        if n <= size:
            continue
        edges = np.linspace(0, n, size + 1).round().astype(int)
        a = np.add.reduceat(a, edges[:-1], axis=axis) / np.diff(edges).reshape(
            (-1, 1) if axis == -2 else (-1,))
    return a


def _top_k(a: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and weights of the ``k`` largest entries of each row, largest first.

    Shape: a ``(L, H, Tq, Tk)`` -> two arrays ``(L, H, Tq, k)``.
    """
    tk = a.shape[-1]
    if k >= tk:
        idx = np.broadcast_to(np.arange(tk), a.shape).copy()
    else:
        idx = np.argpartition(a, tk - k, axis=-1)[..., tk - k:]  # the k largest, unordered
    vals = np.take_along_axis(a, idx, axis=-1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return np.take_along_axis(idx, order, axis=-1), np.take_along_axis(vals, order, axis=-1)


def _prediction_text(pred: Prediction, name: str) -> str | None:
    if pred is None:
        return None
    if isinstance(pred, str):
        return pred
    if isinstance(pred, Mapping):
        label = pred.get("label")
        prob = pred.get("probability")
        if label is None:
            raise ValueError(f"{name}: a prediction mapping needs a 'label' key, got {sorted(pred)}")
        return f"{label} (p = {float(prob):.3f})" if prob is not None else str(label)
    raise TypeError(f"{name}: expected a str, a mapping with 'label' or None, got {type(pred).__name__}")


def _example(a: np.ndarray, queries: list[str], keys: list[str], cross: bool,
             prediction: str | None, name: str, limits: ReportLimits) -> dict[str, Any]:
    """Pack one example's ``(L, H, Tq, Tk)`` weights into the report's JSON form."""
    a = a.astype(np.float32, copy=False)
    n_layers, n_heads, tq, tk = a.shape
    k = min(limits.top_k, tk)
    idx, vals = _top_k(a, k)  # (L, H, Tq, k) each
    mass = a.sum(axis=-1)  # (L, H, Tq)
    kept = vals.sum(axis=-1)
    live = mass > 0
    coverage = np.where(live, kept / np.where(live, mass, 1.0), np.nan)
    with np.errstate(invalid="ignore"):
        cov_head = np.nanmean(np.where(live, coverage, np.nan), axis=-1)  # (L, H)
    thumbs = _block_average(a, limits.thumb_size)  # (L, H, sq, sk)
    peak = thumbs.max(axis=(-2, -1), keepdims=True)
    thumbs = np.divide(thumbs, peak, out=np.zeros_like(thumbs), where=peak > 0)
    entropy = attention_entropy(a)  # (L, H)
    return {
        "name": name,
        "queries": queries,
        "keys": keys,
        "cross": cross,
        "prediction": prediction,
        "L": n_layers, "H": n_heads, "Tq": tq, "Tk": tk, "k": k,
        "idx": _b64(idx.astype("<u2")),
        "val": _b64(np.clip(np.rint(vals * 255.0), 0, 255).astype(np.uint8)),
        "sq": thumbs.shape[-2], "sk": thumbs.shape[-1],
        "thumb": _b64(np.rint(thumbs * 255.0).astype(np.uint8)),
        "entropy": np.round(np.nan_to_num(entropy, nan=0.0), 3).tolist(),
        "coverage": np.round(np.nan_to_num(cov_head, nan=1.0), 3).tolist(),
    }


def pad_examples(maps: Sequence[np.ndarray]) -> np.ndarray:
    """Examples of different shapes (an encoder-decoder's roles) laid into zeros of the largest.

    Each example is then cut back to its own tokens by the report; an example
    with fewer layers or heads shows empty ones.

    Shape:
        maps: each ``(L, H, Tq, Tk)``; returns ``(B, L, H, Tq, Tk)``.
    """
    size = [max(int(m.shape[i]) for m in maps) for i in range(4)]
    out = np.zeros((len(maps), *size), np.float32)  # (B, L, H, Tq, Tk)
    for b, m in enumerate(maps):
        ell, h, tq, tk = m.shape
        out[b, :ell, :h, :tq, :tk] = m
    return out


@dataclass(frozen=True)
class ExampleMaps:
    """A batch whose examples keep their own shapes: one ``(L, H, Tq, Tk)`` array each, never padded.

    Passed as ``attentions`` with one token list per example, each example
    shows its own layers, heads and tokens (views of different sizes, such as
    an encoder-decoder's roles or a windowed model's stages, at no more memory
    than their own).
    """

    maps: Sequence[np.ndarray]


def _is_batch(tokens: Any) -> bool:
    return (isinstance(tokens, Sequence) and not isinstance(tokens, str) and len(tokens) > 0
            and all(isinstance(t, Sequence) and not isinstance(t, str) for t in tokens))


def _split_examples(
    tokens: Any, attentions: Any, source_tokens: Any
) -> list[tuple[np.ndarray, list[str], list[str], bool]]:
    """Normalise the accepted inputs to a list of ``(weights (L,H,Tq,Tk), queries, keys, cross)``."""
    if isinstance(attentions, ExampleMaps):
        return _split_examples_apart(tokens, attentions, source_tokens)
    per_layer = is_layer_list(attentions)
    a = stack_layers(attentions, dtype=None)
    batch = _is_batch(tokens)
    if batch:
        if per_layer and a.ndim == 5:
            a = a.transpose(1, 0, 2, 3, 4)  # list per layer of (B, H, Tq, Tk) -> (B, L, H, Tq, Tk)
        check_ndim(a, (5,), "attentions", "(B, L, H, Tq, Tk) when tokens is one list per example")
        if a.shape[0] != len(tokens):
            raise ValueError(f"tokens: expected {a.shape[0]} token lists (one per example), got {len(tokens)}")
        if source_tokens is not None and (not _is_batch([t for t in source_tokens if t is not None] or [[]])
                                          or len(source_tokens) != a.shape[0]):
            raise ValueError(f"source_tokens: expected {a.shape[0]} token lists (one per example, None for "
                             "self-attention)")
        per_example = [(a[b], tokens[b], None if source_tokens is None else source_tokens[b])
                       for b in range(a.shape[0])]
    else:
        if a.ndim == 5 and a.shape[1] == 1:
            a = a[:, 0]  # one example given as a list per layer of (1, H, Tq, Tk)
        check_ndim(a, (4,), "attentions", "(L, H, Tq, Tk) or a list of L arrays (H, Tq, Tk)")
        per_example = [(a, tokens, source_tokens)]
    return _check_examples(per_example, batch)


def _split_examples_apart(
    tokens: Any, attentions: ExampleMaps, source_tokens: Any
) -> list[tuple[np.ndarray, list[str], list[str], bool]]:
    """:func:`_split_examples` for :class:`ExampleMaps`: each example its own ``(L, H, Tq, Tk)``."""
    maps = [np.asarray(m) for m in attentions.maps]
    for b, m in enumerate(maps):
        check_ndim(m, (4,), f"attentions[{b}]", "(L, H, Tq, Tk)")
    if not _is_batch(tokens) or len(tokens) != len(maps):
        raise ValueError(f"tokens: expected {len(maps)} token lists (one per example of ExampleMaps)")
    sources = [None] * len(maps) if source_tokens is None else list(source_tokens)
    if len(sources) != len(maps):
        raise ValueError(f"source_tokens: expected {len(maps)} entries (one per example, None for self-attention)")
    return _check_examples(list(zip(maps, tokens, sources, strict=True)), True)


def _check_examples(per_example: list[tuple[np.ndarray, Any, Any]], batch: bool
                    ) -> list[tuple[np.ndarray, list[str], list[str], bool]]:
    """Each example cut to its tokens, the tokens checked against its weights."""
    out = []
    for b, (w, q_tok, k_tok) in enumerate(per_example):
        where = f"[{b}]" if batch else ""
        if q_tok is None:
            q_tok = [str(i) for i in range(w.shape[-2])]
        if len(q_tok) > w.shape[-2]:
            raise ValueError(f"tokens{where}: expected at most {w.shape[-2]} tokens (Tq), got {len(q_tok)}")
        tq = len(q_tok)  # examples shorter than the padded batch are cut to their length
        cross = k_tok is not None
        tk = len(k_tok) if k_tok is not None else (tq if w.shape[-1] == w.shape[-2] else w.shape[-1])
        if tk > w.shape[-1]:
            raise ValueError(f"source_tokens{where}: expected at most {w.shape[-1]} tokens (Tk), got {tk}")
        w = w[..., :tq, :tk]
        out.append((w, check_tokens(q_tok, tq, f"tokens{where}"),
                    check_tokens(k_tok if cross else (q_tok if tk == tq else None), tk,
                                 f"source_tokens{where}"), cross))
    return out


def report_data(
    tokens: Any,
    attentions: Any,
    *,
    title: str = "Attention report",
    predictions: Prediction | Sequence[Prediction] = None,
    source_tokens: Any = None,
    example_names: Sequence[str] | None = None,
    limits: ReportLimits | None = None,
) -> dict[str, Any]:
    """The JSON-ready data of a report (see :func:`write_report` for the arguments).

    Shape:
        as :func:`write_report`: attentions ``(L, H, Tq, Tk)`` for one example,
        ``(B, L, H, Tq, Tk)`` (or per-layer lists) for a batch.
    """
    limits = limits or ReportLimits()
    examples = _split_examples(tokens, attentions, source_tokens)
    n = len(examples)
    if predictions is None or isinstance(predictions, (str, Mapping)):
        preds: list[Prediction] = [predictions] * n if n == 1 or predictions is None else []
        if not preds:
            raise ValueError(f"predictions: expected one prediction per example ({n}), got one")
    else:
        preds = list(predictions)
        if len(preds) != n:
            raise ValueError(f"predictions: expected {n} predictions, got {len(preds)}")
    if example_names is not None and len(example_names) != n:
        raise ValueError(f"example_names: expected {n} names, got {len(example_names)}")
    packed = []
    for b, (w, q, k, cross) in enumerate(examples):
        if w.size and (not np.isfinite(w.sum()) or w.min() < 0):
            raise ValueError(f"attentions: example {b} has negative or non-finite weights")
        name = str(example_names[b]) if example_names is not None else f"example {b}"
        packed.append(_example(w, q, k, cross, _prediction_text(preds[b], f"predictions[{b}]"),
                               name, limits))
    return {"title": str(title), "top_k": limits.top_k, "examples": packed}


def _safe_json(data: Any) -> str:
    """JSON that can sit inside a ``<script>`` element: no ``<``, ``>`` or ``&`` survive."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def summary_html(sections: Sequence[Section]) -> str:
    """Static, escaped HTML of summary ``sections`` (see :data:`Section`); no markup passes through."""
    def esc(value: Any) -> str:
        return html.escape(str(value), quote=True)

    parts = []
    for k, sec in enumerate(sections):
        if "title" not in sec:
            raise ValueError(f"summary[{k}]: a section needs a 'title', got keys {sorted(sec)}")
        body = [f"<h2>{esc(sec['title'])}</h2>"] + [f"<p>{esc(t)}</p>" for t in sec.get("text", ())]
        columns, rows = list(sec.get("columns", ())), list(sec.get("rows", ()))
        if columns or rows:
            head = "".join(f"<th>{esc(c)}</th>" for c in columns)
            cells = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>" for row in rows)
            body.append(f"<table>{f'<tr>{head}</tr>' if head else ''}{cells}</table>")
        parts.append(f'<section class="summary">{"".join(body)}</section>')
    return (_SUMMARY_CSS + "".join(parts) + "\n") if parts else ""


def render_html(data: Mapping[str, Any], summary: Sequence[Section] = ()) -> str:
    """The full page for ``data`` (from :func:`report_data`), with optional ``summary`` sections
    (escaped text and tables, :func:`summary_html`) between the header and the attention views.
    ``data["neuron"]`` (from :func:`attnkit.viz.neuron.neuron_data`), when present, adds the neuron view."""
    neuron = "neuron" in data
    script = JS + NEURON_JS if neuron else JS
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
           "img-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'")
    parts = {"CSP": html.escape(csp, quote=True), "TITLE": html.escape(str(data["title"]), quote=True),
             "CSS": CSS + NEURON_CSS if neuron else CSS, "DATA": _safe_json(data), "JS": script,
             "SUMMARY": summary_html(summary)}
    page = PAGE.replace("</header>\n", "</header>\n@SUMMARY@", 1)
    if neuron:
        page = page.replace("</main>", NEURON_SECTION + "</main>", 1)
    # one pass, so text put in (a token spelled "@JS@", say) is never substituted again
    return re.sub(r"@(CSP|TITLE|CSS|DATA|JS|SUMMARY)@", lambda m: parts[m.group(1)], page)


def write_report(
    path: str | os.PathLike[str],
    tokens: Any,
    attentions: Any,
    *,
    title: str = "Attention report",
    predictions: Prediction | Sequence[Prediction] = None,
    source_tokens: Any = None,
    example_names: Sequence[str] | None = None,
    top_k: int = 8,
    thumb_size: int = 48,
    summary: Sequence[Section] = (),
) -> Path:
    """Write the interactive attention report to ``path`` (one HTML file) and return it.

    Args:
        path: the ``.html`` file to write (atomically: temp file + rename).
        tokens: the query tokens — ``T`` strings for one example, or one list
            per example for a batch (shorter lists cut the padded weights).
        attentions: weights from attnkit layers, NumPy or a model's
            ``output_attentions`` (one entry per layer), or an
            :class:`ExampleMaps` of examples that keep their own shapes.
        title: the page title.
        predictions: per example, a string or ``{"label": ..., "probability": ...}``.
        source_tokens: for cross-attention, the key (source) tokens, in the same
            form as ``tokens``; queries are then the target tokens. In a batch,
            an entry may be None: that example is self-attention.
        example_names: labels for the example selector.
        top_k: edges kept per query row.
        thumb_size: cells per side of the model-view thumbnails, at most.
        summary: sections of escaped text and tables shown above the views
            (see :func:`summary_html`), e.g. a run's scores.

    Shape:
        attentions: one example ``(L, H, Tq, Tk)`` or a list of ``L`` arrays
        ``(H, Tq, Tk)``; a batch ``(B, L, H, Tq, Tk)`` or a list of ``L`` arrays
        ``(B, H, Tq, Tk)``. Self-attention has ``Tq == Tk``.
    """
    target = Path(path)
    if target.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"path: expected a file ending in .html, got {str(path)!r}")
    data = report_data(tokens, attentions, title=title, predictions=predictions,
                       source_tokens=source_tokens, example_names=example_names,
                       limits=ReportLimits(top_k=top_k, thumb_size=thumb_size))
    return write_page(target, render_html(data, summary))


def write_page(path: str | os.PathLike[str], page: str) -> Path:
    """Write ``page`` to ``path`` (an ``.html`` file) atomically: a temporary file, then a rename."""
    target = Path(path)
    if target.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"path: expected a file ending in .html, got {str(path)!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(page)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target
