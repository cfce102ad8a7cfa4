"""What a capture draws: the HTML report (inline in Jupyter too), figures, rollout, entropy.

The capture hands NumPy arrays to :mod:`attnkit.viz`, which does the drawing:
the offline report with its head, model and neuron views
(:func:`~attnkit.viz.report.write_report`), the heatmaps and head grids of
:mod:`attnkit.viz.plots`, :func:`~attnkit.viz.measures.attention_rollout` and
:func:`~attnkit.viz.measures.attention_entropy`, and for vision models the
rollout of the class token laid over the input image
(:func:`~attnkit.viz.explain.plot_image_attention`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

    from attnkit.inspect.timm_blocks import WindowLayout
    from attnkit.viz.notebook import ReportView

__all__ = ["CaptureViews"]


class CaptureViews:
    """Drawing methods of :class:`~attnkit.inspect.Capture` (reads ``weights`` and ``vectors``)."""

    weights: dict[str, Tensor]
    vectors: dict[str, tuple[Tensor, Tensor]]
    roles: dict[str, str]
    missed: dict[str, str]
    layouts: dict[str, WindowLayout]

    def _names(self, names: Sequence[str] | None) -> list[str]:
        if not self.weights:
            raise ValueError("the capture recorded no attention weights: run the model inside `with capture(...)`")
        if names is None:
            return list(self.weights)
        unknown = [n for n in names if n not in self.weights]
        if unknown:
            raise ValueError(f"names: no weights recorded for {unknown}; recorded: {list(self.weights)}")
        return list(names)

    def stacked(self, names: Sequence[str] | None = None) -> np.ndarray:
        """The recorded weights as one float32 array, layers in call order.

        Shape:
            returns ``(B, L, H, Tq, Tk)``; every chosen call must have the same shape.
        """
        chosen = self._names(names)
        shapes = {n: tuple(self.weights[n].shape) for n in chosen}
        if len(set(shapes.values())) > 1:
            raise ValueError(f"the recorded weights differ in shape, {shapes}: pass names= to choose "
                             "calls of one shape (e.g. only the self-attention of a decoder)")
        return np.stack([self.weights[n].detach().float().cpu().numpy() for n in chosen], axis=1)

    def _example(self, tokens: Any, example: int | None, names: Sequence[str] | None) -> tuple[np.ndarray, Any]:
        """The weights ``(L, H, Tq, Tk)`` of one example (or ``(B, ...)`` for a batch of token lists)."""
        a = self.stacked(names)  # (B, L, H, Tq, Tk)
        b, tq = a.shape[0], a.shape[-2]
        batch_tokens = isinstance(tokens, Sequence) and not isinstance(tokens, str) and len(tokens) > 0 \
            and all(isinstance(t, Sequence) and not isinstance(t, str) for t in tokens)
        if batch_tokens and example is None:
            if len(tokens) != b:
                raise ValueError(f"tokens: the weights hold {b} examples, got {len(tokens)} token lists")
            for i, t in enumerate(tokens):
                if len(t) > tq:
                    raise ValueError(f"tokens[{i}]: {len(t)} tokens, but the weights have Tq = {tq}")
            return a, [list(map(str, t)) for t in tokens]
        if example is None:
            if b != 1:
                raise ValueError(f"the weights hold a batch of {b}: pass example= or one token list per example")
            example = 0
        if not -b <= example < b:
            raise ValueError(f"example: expected an index into the batch of {b}, got {example}")
        if tokens is None:
            return a[example], [str(i) for i in range(tq)]
        if isinstance(tokens, str) or len(tokens) != tq:
            n = "a string" if isinstance(tokens, str) else f"{len(tokens)} tokens"
            raise ValueError(f"tokens: got {n}, but the weights have Tq = {tq} queries "
                             "(give one string per position, special tokens included)")
        return a[example], [str(t) for t in tokens]

    def view(self, tokens: Any = None, *, example: int | None = None, names: Sequence[str] | None = None,
             title: str = "Attention", source_tokens: Any = None, neuron: bool = False,
             top_k: int = 8) -> ReportView:
        """The HTML report as an object that Jupyter displays inline (``_repr_html_``).

        ``neuron=True`` adds the neuron view (needs ``capture(..., vectors=True)``).

        Shape:
            tokens: ``Tq`` strings for one example, or one list per example.
        """
        from attnkit.viz.notebook import ReportView
        from attnkit.viz.report import ReportLimits, report_data

        a, toks = self._example(tokens, example, names)
        data = report_data(toks, a, title=title, source_tokens=source_tokens, limits=ReportLimits(top_k=top_k))
        if neuron:
            from attnkit.viz.neuron import neuron_data

            chosen = self._names(names)
            missing = [n for n in chosen if n not in self.vectors]
            if missing:
                raise ValueError(f"neuron view: no query/key vectors for {missing}; capture with vectors=True "
                                 "(attnkit's own layers do not expose them)")
            ex = 0 if example is None else example
            q = np.stack([self.vectors[n][0][ex].detach().float().cpu().numpy() for n in chosen])
            k = np.stack([self.vectors[n][1][ex].detach().float().cpu().numpy() for n in chosen])
            w = a if a.ndim == 4 else a[ex]
            first = toks if isinstance(toks[0], str) else toks[ex]
            data["neuron"] = neuron_data(first, q, k, w, layer_names=chosen)
        return ReportView(data)

    def role_maps(self, source_tokens: Sequence[str], target_tokens: Sequence[str], *,
                  example: int = 0) -> list[tuple[str, list[str], list[str] | None, np.ndarray]]:
        """An encoder-decoder's maps of one example by role: ``(role, queries, keys, maps)`` for encoder
        self, decoder self and cross, each role's calls stacked in call order.

        Queries and keys carry the tokens of their side: the source for the
        encoder, the target (what the decoder read) for the decoder's queries;
        ``keys`` is None where they are the queries.

        Raises:
            ValueError: a role was not recorded, or the tokens do not match its maps' lengths.

        Shape:
            source_tokens ``Ts`` strings, target_tokens ``Tt`` strings; each maps ``(L, H, Tq, Tk)``.
        """
        out: list[tuple[str, list[str], list[str] | None, np.ndarray]] = []
        for role, q_tok, k_tok in (("encoder self", source_tokens, None), ("decoder self", target_tokens, None),
                                   ("cross", target_tokens, source_tokens)):
            chosen = [n for n in self.weights if self.roles.get(n) == role]
            if not chosen:
                missed = f"; not recorded: {self.missed}" if self.missed else ""
                raise ValueError(f"no {role}-attention was recorded; recorded roles: "
                                 f"{sorted(set(self.roles.values()))}{missed}")
            a = self.stacked(chosen)[example]  # (L, H, Tq, Tk)
            want = (len(q_tok), len(k_tok if k_tok is not None else q_tok))
            if a.shape[-2:] != want:
                side = "source_tokens" if role == "encoder self" else "target_tokens"
                raise ValueError(f"{side}: the {role} maps are {a.shape[-2]} x {a.shape[-1]} (queries x keys), "
                                 f"the tokens give {want[0]} x {want[1]}")
            out.append((role, [str(t) for t in q_tok], None if k_tok is None else [str(t) for t in k_tok], a))
        return out

    def roles_view(self, source_tokens: Sequence[str], target_tokens: Sequence[str], *, example: int = 0,
                   title: str = "Attention") -> ReportView:
        """An encoder-decoder's report: encoder self, decoder self and cross attention
        (:meth:`role_maps`), one named example each.

        Shape:
            source_tokens ``Ts`` strings, target_tokens ``Tt`` strings.
        """
        from attnkit.viz.notebook import ReportView
        from attnkit.viz.report import ExampleMaps, report_data

        views = self.role_maps(source_tokens, target_tokens, example=example)
        return ReportView(report_data([q for _, q, _, _ in views], ExampleMaps([m for *_, m in views]), title=title,
                                      source_tokens=[k for _, _, k, _ in views],
                                      example_names=[role for role, *_ in views]))

    def image_views(self, *, example: int = 0) -> list[tuple[str, list[str], np.ndarray]]:
        """A windowed or channel model's maps of one example, as views for a report.

        Each windowed call (Swin, MaxViT) is laid on the image
        (:func:`~attnkit.inspect.timm_blocks.place_windows`): a patch's
        attention over every patch of its feature map, zero outside its window;
        the patches are named ``patch (row, column)``. Cross-covariance calls
        (XCiT's role ``"channel"``) are channel x channel maps, each head over
        its own ``C/H`` channels, named ``channel i`` within the head. A view
        holds the consecutive calls of one kind, positions and heads (a stage);
        its name gives the calls and what they attend over.

        Raises:
            ValueError: the capture holds neither windowed nor channel maps.

        Shape:
            each view's maps are ``(L, H, HW, HW)`` (windowed) or ``(L, H, C/H, C/H)`` (channel).
        """
        from attnkit.inspect.timm_blocks import place_windows

        groups: list[tuple[tuple[Any, ...], list[str]]] = []
        for name, w in self.weights.items():
            layout = self.layouts.get(name)
            if layout is not None:
                key: tuple[Any, ...] = ("patch", layout.image, int(w.shape[1]))
            elif self.roles.get(name) == "channel":
                key = ("channel", int(w.shape[-1]), int(w.shape[1]))
            else:
                continue
            if groups and groups[-1][0] == key:
                groups[-1][1].append(name)
            else:
                groups.append((key, [name]))
        if not groups:
            raise ValueError("the capture holds no windowed (Swin, MaxViT) or channel (XCiT) maps; recorded: "
                             f"{sorted(set(self.roles.values())) or 'nothing'}")
        out = []
        for key, names in groups:
            if key[0] == "patch":
                rows, cols = key[1]
                tokens = [f"patch ({r}, {c})" for r in range(rows) for c in range(cols)]
                kinds = sorted({f"{self.layouts[n].kind} {self.layouts[n].window[0]}x{self.layouts[n].window[1]}"
                                for n in names})
                what = f"{rows}x{cols} patches, {' and '.join(kinds)} attention laid on the image"
                maps = [place_windows(self.weights[n][self._batch_slice(n, example)], self.layouts[n])[0]
                        for n in names]
            else:
                tokens = [f"channel {i}" for i in range(key[1])]
                what = f"channel x channel, each head over its own {key[1]} channels"
                maps = [self.weights[n][self._check_example(example, self.weights[n].shape[0])] for n in names]
            span = names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}"
            out.append((f"{span} · {what}", tokens, np.stack([m.detach().float().cpu().numpy() for m in maps])))
        return out

    def _batch_slice(self, name: str, example: int) -> slice:
        """The windows of one example in a windowed call's ``(B * windows, H, N, N)`` weights."""
        n_win = self.layouts[name].positions().shape[0]
        start = self._check_example(example, self.weights[name].shape[0] // n_win) * n_win
        return slice(start, start + n_win)

    @staticmethod
    def _check_example(example: int, b: int) -> int:
        if not -b <= example < b:
            raise ValueError(f"example: expected an index into the batch of {b}, got {example}")
        return example % b

    def report(self, path: str | os.PathLike[str], tokens: Any = None, **options: Any) -> Path:
        """Write the offline HTML report (head, model and optionally neuron view) to ``path``.

        Options are those of :meth:`view`.

        Shape:
            tokens: ``Tq`` strings for one example, or one list per example.
        """
        return self.view(tokens, **options).save(path)

    def _repr_html_(self) -> str | None:
        try:
            return self.view(example=0)._repr_html_()
        except ValueError:  # nothing recorded, or calls of several shapes: Jupyter shows repr() instead
            return None

    def figure(self, layer: int | str | None = None, head: int | None = None, *, tokens: Any = None,
               example: int | None = None, names: Sequence[str] | None = None,
               path: str | os.PathLike[str] | None = None) -> Any:
        """A matplotlib figure: every layer × head (no ``layer``), one layer's heads, or one head.

        ``layer`` is an index into the recorded calls or a module name.

        Shape:
            tokens: ``Tq`` strings.
        """
        from attnkit.viz.plots import plot_attention, plot_heads, plot_layers_heads

        a, toks = self._example(tokens, example, names)
        order = self._names(names)
        if layer is None:
            return plot_layers_heads(a, path=path)
        index = order.index(layer) if isinstance(layer, str) and layer in order else layer
        if not isinstance(index, int) or not -len(order) <= index < len(order):
            raise ValueError(f"layer: expected an index or one of {order}, got {layer!r}")
        if head is None:
            return plot_heads(a[index], toks, title=order[index], path=path)
        if not -a.shape[1] <= head < a.shape[1]:
            raise ValueError(f"head: expected an index into {a.shape[1]} heads, got {head}")
        return plot_attention(a[index, head], toks, title=f"{order[index]}, head {head}", path=path)

    def rollout(self, *, example: int | None = None, names: Sequence[str] | None = None,
                residual: bool = True, head_reduce: str = "mean") -> np.ndarray:
        """Attention rollout through the recorded layers (Abnar & Zuidema, 2020).

        Shape:
            returns ``(T, T)`` for one example, ``(B, T, T)`` with ``example=None`` and a batch.
        """
        from attnkit.viz.measures import attention_rollout

        a = self.stacked(names)  # (B, L, H, T, T)
        if example is not None or a.shape[0] == 1:
            return attention_rollout(a[0 if example is None else example], residual=residual,
                                     head_reduce=head_reduce)  # type: ignore[arg-type]
        return attention_rollout(a.transpose(1, 0, 2, 3, 4), residual=residual,
                                 head_reduce=head_reduce)  # type: ignore[arg-type]

    def entropy(self, *, example: int = 0, names: Sequence[str] | None = None) -> np.ndarray:
        """Mean entropy (nats) of each layer's heads.

        Shape:
            returns ``(L, H)``.
        """
        from attnkit.viz.measures import attention_entropy

        return attention_entropy(self.stacked(names)[example])

    def image_rollout(self, image: Any, *, example: int = 0, prefix_tokens: int = 1,
                      names: Sequence[str] | None = None, path: str | os.PathLike[str] | None = None) -> Any:
        """The class token's rollout over the patches, laid over ``image`` (vision transformers).

        ``prefix_tokens`` leading tokens (class, distillation, registers) are
        not patches; the rest must form a square grid.

        Shape:
            image ``(H, W)`` or ``(H, W, 3)``; the weights ``(T, T)`` with ``T = prefix + g * g``.
        """
        from attnkit.viz.explain import plot_image_attention

        r = self.rollout(example=example, names=names)  # (T, T)
        patches = r.shape[-1] - prefix_tokens
        side = math.isqrt(max(patches, 0))
        if prefix_tokens < 1 or side * side != patches or patches == 0:
            raise ValueError(f"image_rollout: {r.shape[-1]} tokens less {prefix_tokens} prefix tokens "
                             "do not form a square grid of patches")
        grid = r[0, prefix_tokens:].reshape(side, side)
        return plot_image_attention(image, grid / grid.sum(), title="Attention rollout", path=path)
