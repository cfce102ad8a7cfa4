"""Context parallelism (attnkit.parallel.ring_attention): bytes sent, memory per process, time.

Usage::

    python benchmarks/context_parallel.py [--quick | --longest [--budget MIB]]

Every figure comes from separate processes started by this script (gloo on
CPU, one thread each), both sides of a ratio measured the same way in the
same run:

* **communication** -- four processes, T = 32,768 (four slices of 8,192), B=1
  H=2 Dh=16, forward+backward: the bytes each process sent for a causal
  sliding window of 512 (``and_mods(causal_mod, sliding_window_mod(512))`` as
  a BlockMask) against the full ring (no mask: every slice to every process).
  Target: window <= 0.4x the full ring's bytes.
* **memory** -- per-process peak (VmHWM) of one causal attention
  forward+backward at the same T (B=2 H=16 Dh=64 float32, T = 8,192):
  ``attnkit.attention`` in one process against ``ring_attention`` in each of
  two. Reported whole and above the process's resident size after imports
  (the interpreter and torch, the same in both); target <= 0.6x.
* **time** -- the wall time of that forward+backward (second call), one
  process against the slower of the two.
* **longest** (``--longest``) -- under the same per-process memory limit, the
  longest T whose causal forward+backward (B=1 H=16 Dh=64 float32) completes
  in one process (``attnkit.attention``) and in each of two
  (``ring_attention``, balanced layout). Each process, after its imports (and,
  for the ring, the process group's setup), reads its own VmSize and sets
  ``RLIMIT_AS`` to VmSize + ``--budget`` MiB (default 256), the same on both
  sides, with ``MALLOC_ARENA_MAX=2``: the limit counts what the attention
  reserves, not the interpreter, torch or gloo's threads. A run fits when the
  step completes; a MemoryError, an allocation RuntimeError, a crash or (for
  the ring) a ContextParallelError of a dead peer means it does not (the ring
  runs with ``timeout=60``). T is doubled from 1,024 until a run fails, then
  bisected to 5 % (multiples of 64). Target: two processes >= 1.8x one. It
  runs by default; ``--quick`` skips it (each probe is a full
  forward+backward at up to 16k tokens: about 8 minutes on 2 shared cores),
  ``--longest`` runs only it.

``--quick`` divides the lengths by 4 (the targets are for the full sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import torch


def _status(field: str) -> int:
    """A ``/proc/self/status`` size in bytes (VmHWM: the peak resident size, VmRSS: the current one); 0 unread."""
    from attnkit._memory import status_bytes

    return status_bytes(field) or 0


def _child(opts: argparse.Namespace) -> dict[str, float]:
    """One process of a measurement (run by this script with ``--child``); prints its figures as JSON."""
    import torch.distributed as dist

    from attnkit import attention
    from attnkit.core.block_mask import and_mods, causal_mod, create_block_mask, sliding_window_mod
    from attnkit.parallel import comm_stats, reset_comm_stats, ring_attention

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    base = _status("VmRSS")
    t, b, h, dh = opts.t, opts.b, opts.h, opts.dh
    tl = t // world
    g = torch.Generator().manual_seed(int(os.environ.get("RANK", "0")))
    q, k, v = (torch.randn(b, h, tl, dh, generator=g).requires_grad_() for _ in range(3))
    kwargs: dict[str, object] = {"causal": True}
    if opts.window:
        kwargs = {"mask": create_block_mask(and_mods(causal_mod, sliding_window_mod(opts.window)), None, None, t, t)}
    elif opts.full:
        kwargs = {}

    def step() -> None:
        for x in (q, k, v):
            x.grad = None  # as zero_grad(set_to_none=True) before a training step
        out = attention(q, k, v, **kwargs) if world == 1 else ring_attention(q, k, v, **kwargs)  # type: ignore[arg-type]
        out.sum().backward()

    step()
    reset_comm_stats()
    start = time.perf_counter()
    step()
    seconds = time.perf_counter() - start
    stats = comm_stats()
    found = {"peak": _status("VmHWM"), "base": base, "seconds": seconds,
             "forward_bytes": stats.sent.get("forward", 0), "backward_bytes": stats.sent.get("backward", 0)}
    if world > 1:
        dist.destroy_process_group()
    return found


def _fit_child(opts: argparse.Namespace) -> dict[str, float]:
    """One process of a ``--longest`` probe: limit address space to VmSize + budget, then one forward+backward."""
    import resource

    import torch.distributed as dist

    from attnkit import attention
    from attnkit.parallel import ContextParallelError, ring_attention

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    t, b, h, dh = opts.t, opts.b, opts.h, opts.dh
    tl = t // world
    g = torch.Generator().manual_seed(int(os.environ.get("RANK", "0")))
    base = _status("VmSize")
    resource.setrlimit(resource.RLIMIT_AS, (base + opts.budget * 2**20, resource.RLIM_INFINITY))
    ok, why = True, ""
    try:
        q, k, v = (torch.randn(b, h, tl, dh, generator=g).requires_grad_() for _ in range(3))
        if world == 1:
            out = attention(q, k, v, causal=True)
        else:
            out = ring_attention(q, k, v, causal=True, layout="balanced", timeout=60)
        out.sum().backward()
        del out, q, k, v
    except (MemoryError, ContextParallelError) as e:
        ok, why = False, type(e).__name__
    except RuntimeError as e:
        if "alloc" not in str(e).lower() and "memory" not in str(e).lower():
            raise
        ok, why = False, "RuntimeError: " + str(e).splitlines()[0][:80]
    found = {"ok": ok, "why": why, "vmsize": base, "peak": _status("VmHWM"), "peak_vm": _status("VmPeak")}
    if world > 1 and ok:
        dist.destroy_process_group()
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(world: int, args: list[str]) -> list[dict[str, float]]:
    """``world`` fresh processes of this script with ``--child``, as torchrun would start them; their figures."""
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", *args], env=env,
                                      stdout=subprocess.PIPE, text=True))
    found = []
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        if p.returncode:
            raise SystemExit(f"a measuring process failed ({p.returncode}); run it by hand: --child {' '.join(args)}")
        found.append(json.loads(out.strip().splitlines()[-1]))
    return found


def _mib(x: float) -> str:
    return f"{x / 2**20:.0f} MiB" if x >= 10 * 2**20 else f"{x / 2**10:.0f} KiB"


def communication(scale: int) -> None:
    t = 32768 // scale
    common = ["--t", str(t), "--b", "1", "--h", "2", "--dh", "16"]
    window = _launch(4, [*common, "--window", "512"])
    full = _launch(4, [*common, "--full"])
    print(f"communication: 4 processes, T={t} ({t // 4} per process), B=1 H=2 Dh=16 float32, forward+backward")
    for rank, (w, f) in enumerate(zip(window, full, strict=True)):
        wb, fb = w["forward_bytes"] + w["backward_bytes"], f["forward_bytes"] + f["backward_bytes"]
        print(f"  rank {rank}: window 512 {_mib(wb)} (forward {_mib(w['forward_bytes'])}), full ring {_mib(fb)} "
              f"(forward {_mib(f['forward_bytes'])}), ratio {wb / fb:.3f}")
    wsum = sum(w["forward_bytes"] + w["backward_bytes"] for w in window)
    fsum = sum(f["forward_bytes"] + f["backward_bytes"] for f in full)
    verdict = "PASS" if wsum <= 0.4 * fsum else "MISS"
    print(f"  all ranks: window {_mib(wsum)} vs full ring {_mib(fsum)} = {wsum / fsum:.3f}x (target <= 0.4x) {verdict}")
    print(f"  time of the step: window {max(w['seconds'] for w in window):.2f} s, "
          f"full ring {max(f['seconds'] for f in full):.2f} s (slowest process)")


def memory_and_time(scale: int) -> None:
    t = 8192 // scale
    common = ["--t", str(t), "--b", "2", "--h", "16", "--dh", "64"]
    (one,) = _launch(1, common)
    two = _launch(2, common)
    peak2 = max(x["peak"] for x in two)
    net1, net2 = one["peak"] - one["base"], max(x["peak"] - x["base"] for x in two)
    print(f"memory: causal attention forward+backward, B=2 H=16 T={t} Dh=64 float32, peak per process (VmHWM)")
    print(f"  1 process (attnkit.attention): {_mib(one['peak'])} whole, {_mib(net1)} above its "
          f"{_mib(one['base'])} after imports")
    print(f"  2 processes (ring_attention):  {_mib(peak2)} whole, {_mib(net2)} above imports")
    verdict = "PASS" if net2 <= 0.6 * net1 else "MISS"
    print(f"  ratio 2 vs 1: {peak2 / one['peak']:.2f}x whole, {net2 / net1:.2f}x above imports "
          f"(target <= 0.6x) {verdict}")
    slow = max(x["seconds"] for x in two)
    print(f"time: 1 process {one['seconds']:.2f} s, 2 processes {slow:.2f} s (slowest); "
          f"{one['seconds'] / slow:.2f}x (one thread per process; not expected to be faster on 2 shared cores)")


def _fits(world: int, t: int, budget: int) -> bool:
    """Whether causal forward+backward at ``t`` completes in each of ``world`` processes under the budget."""
    port = str(_free_port())
    args = ["--fit", "--t", str(t), "--b", "1", "--h", "16", "--dh", "64", "--budget", str(budget)]
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1", MALLOC_ARENA_MAX="2")
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    ok, notes = True, []
    for p in procs:
        try:
            out, err = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            out, err = p.communicate()
            ok = False
            notes.append("hung")
            continue
        lines = out.strip().splitlines()
        if p.returncode or not lines:
            ok = False
            notes.append(f"exit {p.returncode}: {err.strip().splitlines()[-1][:80] if err.strip() else ''}")
            continue
        found = json.loads(lines[-1])
        ok = ok and found["ok"]
        notes.append(("fits" if found["ok"] else found["why"])
                     + f", peak {_mib(found['peak'])} resident, {_mib(found['peak_vm'] - found['vmsize'])} "
                       f"address space above {_mib(found['vmsize'])}")
    print(f"    {world} process{'es' if world > 1 else ''}, T={t}: {'fits' if ok else 'does not fit'} "
          f"({'; '.join(notes)})", flush=True)
    return ok


def _longest(world: int, budget: int, start: int = 1024, step: int = 64) -> int:
    """The longest T (a multiple of ``step``) that fits: doubling from ``start``, then bisection to 5 %."""
    lo, hi = 0, start
    while _fits(world, hi, budget):
        lo, hi = hi, 2 * hi
    if lo == 0:
        lo, hi = 0, start
    while hi - lo > max(step, lo // 20):
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        if _fits(world, mid, budget):
            lo = mid
        else:
            hi = mid
    return lo


def longest(budget: int) -> None:
    print(f"longest: causal attention forward+backward, B=1 H=16 Dh=64 float32, each process limited to "
          f"{budget} MiB of address space above its VmSize after imports (RLIMIT_AS, MALLOC_ARENA_MAX=2)")
    start = time.perf_counter()
    one = _longest(1, budget)
    two = _longest(2, budget)
    verdict = "PASS" if one and two >= 1.8 * one else "MISS"
    ratio = f"{two / one:.2f}x" if one else "n/a"
    print(f"  budget {budget} MiB per process: longest T, 1 process (attnkit.attention) {one}, "
          f"2 processes (ring_attention, balanced) {two}: {ratio} (target >= 1.8x) {verdict} "
          f"[{time.perf_counter() - start:.0f} s]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="lengths divided by 4")
    parser.add_argument("--longest", action="store_true", help="only the longest-T-under-a-memory-limit section")
    parser.add_argument("--budget", type=int, default=256, help="--longest: MiB of address space per process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fit", action="store_true", help=argparse.SUPPRESS)
    for name in ("t", "b", "h", "dh", "window"):
        parser.add_argument(f"--{name}", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(_fit_child(opts) if opts.fit else _child(opts)))
        return
    scale = 4 if opts.quick else 1
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, gloo, one thread per process")
    if not opts.longest:
        communication(scale)
        memory_and_time(scale)
    if opts.longest or not opts.quick:
        longest(opts.budget)


if __name__ == "__main__":
    main()
