"""The translation run directory and the :class:`Translator` it serves.

:func:`save_translation_run` commits a model and its tokenizers as one
generation, :func:`load_translation_run` reads the committed one back (an
unfinished run only when asked) as a :class:`Translator`, which turns text
into text. Training (:func:`attnkit.train.tasks.translate.translation.fit_translation`)
commits each generation through :func:`commit_translation_run`. The layout
is described in :mod:`attnkit.train.tasks.translate.translation`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from attnkit._modes import eval_mode
from attnkit.data.parallel import TranslationTokenizers, collate_pairs
from attnkit.decoding import BEAM_SIZE, LENGTH_PENALTY, beam_alternatives, beam_search, greedy_decode
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.train.config import TranslationTrainConfig
from attnkit.train.runs import checkpoint as ckpt
from attnkit.train.runs import fileops
from attnkit.train.runs.run import commit_generation, save_run
from attnkit.train.runs.run_files import check_run_config, check_tokenizer_fits, settings_check
from attnkit.train.runs.rundir import RunFileError, RunWriter
from attnkit.train.tasks.translate import MODEL_NAME, TASK
from attnkit.train.tasks.translate.settings import TranslationSettings

__all__ = ["MODEL_NAME", "Translation", "Translator", "output_limit", "save_translation_run", "load_translation_run",
           "commit_translation_run", "snapshot_name"]

TOKENIZER_FILES = ("tokenizer.json", "src_tokenizer.json", "tgt_tokenizer.json")


def save_translation_run(directory: str | os.PathLike[str], model: Seq2SeqTransformer,
                         tokenizers: TranslationTokenizers, *, run_id: str, overwrite: bool = False,
                         extra: dict[str, Any] | None = None) -> Path:
    """Commit model weights, tokenizers and config.json to ``directory`` as one generation.

    ``extra`` adds entries to config.json (``status``: ``"done"`` unless given).
    Raises :class:`attnkit.train.runs.checkpoint.RunExistsError` when the directory
    holds a different run and ``overwrite`` is false. Returns the generation folder.
    """
    meta = dict(extra or {})
    status = str(meta.pop("status", "done"))
    return save_run(directory, lambda writer: commit_translation_run(writer, model, tokenizers, meta, status=status,
                                                                     carry=False),
                    run_id=run_id, overwrite=overwrite)


def commit_translation_run(writer: RunWriter, model: Seq2SeqTransformer, tokenizers: TranslationTokenizers,
                           meta: dict[str, Any], *, status: str, epoch: int | None = None, carry: bool = True,
                           state: dict[str, Any] | None = None, snapshots: Sequence[int] = ()) -> Path:
    """Write and commit one generation.

    With ``carry`` the tokenizers come from the committed generation (the same
    run's), and without ``state`` so does its ``train_state/``. ``state``
    (``optimizer``, ``progress``) writes a new train state holding the weights
    as the last ones; of ``snapshots`` (epochs to keep for averaging) the
    current ``epoch`` is these weights and the others are carried.
    """
    weights = model.tensors_to_save()
    files: dict[str, Any] = {"model.safetensors": ckpt.weights_file(weights)}
    files.update({"tokenizer.json": tokenizers.source.to_str()} if tokenizers.shared else
                 {"src_tokenizer.json": tokenizers.source.to_str(), "tgt_tokenizer.json": tokenizers.target.to_str()})
    if state is not None:
        files.update(ckpt.state_files({"model": weights, "best": None, **state}))
        if epoch is not None and epoch in snapshots:
            files[snapshot_name(epoch)] = lambda path: fileops.fs.link(path.parents[1] / "model.safetensors", path)
    carried = [*TOKENIZER_FILES, *([] if state is not None else [f"{ckpt.STATE_DIR}/"])] if carry else []
    return commit_generation(writer, {"model_name": MODEL_NAME, "model_config": model.config.to_dict(),
                                      "shared_tokenizer": tokenizers.shared, **meta}, status=status, files=files,
                             carry=[*carried, *(snapshot_name(e) for e in snapshots if e != epoch)])


def snapshot_name(epoch: int) -> str:
    """The name, in a generation, of the weights after ``epoch`` kept for averaging."""
    return f"{ckpt.STATE_DIR}/epoch-{epoch}.safetensors"


def _load_tokenizer(path: Path) -> Tokenizer:
    if not path.is_file():
        raise RunFileError(f"run directory is incomplete: {path} is missing")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise RunFileError(f"{path} is not a valid tokenizer file ({exc})") from None


@dataclass(frozen=True)
class Translation:
    """One translated text, with its subword tokens and (on request) the alignment ``(Tt, Ts)``."""

    source: str
    text: str
    source_tokens: list[str]
    target_tokens: list[str]
    score: float
    alignment: torch.Tensor | None = None


def output_limit(source_tokens: int) -> int:
    """Most tokens a translation of ``source_tokens`` tokens generates: ``1.5 * Ts + 10``."""
    return int(1.5 * source_tokens) + 10


def _token_strings(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    return [tokenizer.id_to_token(i) or "[UNK]" for i in ids]


class Translator:
    """A trained model with its tokenizers: text in, text out."""

    def __init__(self, model: Seq2SeqTransformer, tokenizers: TranslationTokenizers, *,
                 max_src_len: int = 256, meta: dict[str, Any] | None = None) -> None:
        self.model, self.tokenizers, self.max_src_len = model, tokenizers, max_src_len
        self.meta = meta or {}

    def translate(self, texts: Sequence[str], *, beam_size: int = BEAM_SIZE, length_penalty: float = LENGTH_PENALTY,
                  batch_size: int = 64, return_alignment: bool = False) -> list[Translation]:
        """Translate ``texts``, by default as ``attnkit translate`` does (beam search of
        :data:`attnkit.decoding.BEAM_SIZE`; greedy for ``beam_size=1``); output length is at most
        :func:`output_limit`."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, got a single str")
        ids = self.tokenizers.encode_source(texts, self.max_src_len)
        for i, seq in enumerate(ids):
            if not texts[i].strip() or not seq:
                raise ValueError(f"text {i} ({texts[i]!r}) is empty after tokenization; nothing to translate")
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        results: dict[int, Translation] = {}
        with eval_mode(self.model):
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                batch = collate_pairs([(ids[i], [0]) for i in chunk])
                # each text's own output limit, so a translation does not depend on the texts beside it
                max_len = [output_limit(len(ids[i])) for i in chunk]
                if beam_size == 1:
                    out = greedy_decode(self.model, batch.src, batch.src_lengths, max_len=max_len,
                                        return_alignment=return_alignment)
                else:
                    out = beam_search(self.model, batch.src, batch.src_lengths, beam_size=beam_size,
                                      length_penalty=length_penalty, max_len=max_len,
                                      return_alignment=return_alignment)
                texts_out = self.tokenizers.decode_target(out.tokens)
                for j, i in enumerate(chunk):
                    results[i] = Translation(
                        texts[i], texts_out[j], _token_strings(self.tokenizers.source, ids[i]),
                        _token_strings(self.tokenizers.target, out.tokens[j]), out.scores[j],
                        None if out.alignments is None else out.alignments[j])
        return [results[i] for i in range(len(ids))]

    def _generated(self, texts: Sequence[str], **decoding: Any) -> list[tuple[Translation, list[int], list[int]]]:
        """Each text translated, with its source ids and its generated target ids (``[EOS]`` left out)."""
        out = []
        sources = self.tokenizers.encode_source(texts, self.max_src_len)
        for result, source in zip(self.translate(texts, **decoding), sources, strict=True):
            found = [self.tokenizers.target.token_to_id(t) for t in result.target_tokens]
            out.append((result, source, [t for t in found if t is not None and t != self.model.config.eos_id]))
        return out

    def explain(self, text: str, *, method: str | None = None, beam_size: int = BEAM_SIZE,
                length_penalty: float = LENGTH_PENALTY) -> dict[str, Any]:
        """``text`` translated (as :meth:`translate`), and each generated token explained by a score per
        source token, with every method's faithfulness measured on this translation
        (:func:`attnkit.attribution.generation.explain_generation`): ``source_tokens``, ``target_tokens``,
        ``scores`` (a row per target token), ``method`` (default: the most faithful on the run's validation
        sentences when it measured them, else on this translation; ``chosen`` says which), ``faithfulness``,
        and ``alternatives``: the beam's finished hypotheses, best first (``text``, ``score``)."""
        from attnkit.attribution.generation import explain_generation

        ((result, source, target),) = self._generated([text], beam_size=beam_size, length_penalty=length_penalty)
        if not target:
            raise ValueError(f"the translation of {text!r} is empty: there is no generated token to explain")
        words = [self.tokenizers.target.id_to_token(t) or "[UNK]" for t in target]
        measured = self.meta.get("metrics", {}).get("explain")
        return {"source": text, "translation": result.text, "source_tokens": result.source_tokens,
                "target_tokens": words, "alternatives": self.alternatives(text, beam_size=max(beam_size, 2),
                                                                          length_penalty=length_penalty),
                **explain_generation(self.model, source, target, method=method, measured=measured)}

    def alternatives(self, text: str, *, beam_size: int = BEAM_SIZE, length_penalty: float = LENGTH_PENALTY
                     ) -> list[dict[str, Any]]:
        """The beam's finished hypotheses for ``text``, best first: ``{"text", "score"}`` (the score the beam
        ranks by: log-probability over the GNMT length penalty)."""
        (ids,) = self.tokenizers.encode_source([text], self.max_src_len)
        batch = collate_pairs([(ids, [0])])
        with eval_mode(self.model):
            (hyps,) = beam_alternatives(self.model, batch.src, batch.src_lengths, beam_size=beam_size,
                                        max_len=output_limit(len(ids)), length_penalty=length_penalty)
        return [{"text": text_out, "score": round(h.score, 4)}
                for h, text_out in zip(hyps, self.tokenizers.decode_target([h.tokens for h in hyps]), strict=True)]

    def measure_methods(self, texts: Sequence[str]) -> dict[str, Any] | None:
        """Every explanation method's faithfulness over the translations of ``texts`` (a run's validation
        sentences): :func:`attnkit.attribution.generation.measure_methods`."""
        from attnkit.attribution.generation import measure_methods

        return measure_methods(self.model, [(source, target) for _, source, target in self._generated(texts)])


def load_translation_run(directory: str | os.PathLike[str], *, device: str = "cpu",
                         allow_unfinished: bool = False) -> Translator:
    """Load the committed generation of a translation run.

    A run whose training did not finish raises :class:`UnfinishedRunError`
    unless ``allow_unfinished`` (then ``meta["notice"]`` says which weights are
    served). A missing, damaged or foreign file raises :class:`RunFileError` naming it.
    """
    path = Path(directory)
    if not path.is_dir():
        raise RunFileError(f"checkpoint {str(path)!r} is not a directory")
    folder, meta = TASK.committed(path, allow_unfinished=allow_unfinished)
    check_run_config(folder / "config.json", meta, {"settings": settings_check(TranslationSettings),
                                                    "train_config": settings_check(TranslationTrainConfig)})
    weights = folder / "model.safetensors"
    try:
        model = Seq2SeqTransformer(Seq2SeqConfig.from_dict(meta["model_config"]))
    except (KeyError, TypeError, ValueError) as err:
        raise RunFileError(f"{folder / 'config.json'} holds a model config that does not build: {err}") from None
    try:
        tensors = ckpt.load_finite_tensors(weights, model.state_dict(), f"the model of {folder / 'config.json'}")
        model.load_saved_tensors(tensors)
    except (RuntimeError, ValueError) as err:
        if isinstance(err, RunFileError):
            raise
        raise RunFileError(f"{weights} does not fit the model of {folder / 'config.json'}: "
                           f"{' '.join(str(err).split())[:400]}") from None
    model.to(device).eval()
    if meta.get("shared_tokenizer", True):
        joint = _load_tokenizer(folder / "tokenizer.json")
        tokenizers = TranslationTokenizers(joint, joint)
    else:
        tokenizers = TranslationTokenizers(_load_tokenizer(folder / "src_tokenizer.json"),
                                           _load_tokenizer(folder / "tgt_tokenizer.json"))
    shared = meta.get("shared_tokenizer", True)
    files = ("tokenizer.json",) * 2 if shared else ("src_tokenizer.json", "tgt_tokenizer.json")
    for field, tokenizer, name in zip(("src_vocab_size", "tgt_vocab_size"), (tokenizers.source, tokenizers.target),
                                      files, strict=True):
        check_tokenizer_fits(folder / name, tokenizer, getattr(model.config, field), field=field)
    training = meta["settings"]["training"] if "settings" in meta else meta.get("train_config", {})  # older runs
    max_src = training.get("max_len", 256)
    return Translator(model, tokenizers, max_src_len=max_src, meta=meta)
