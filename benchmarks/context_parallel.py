"""Context parallelism (attnkit.parallel.ring_attention): bytes sent, memory per process, time.

Usage::

    python benchmarks/context_parallel.py [--quick]

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
    """A ``/proc/self/status`` size in bytes (VmHWM: the peak resident size, VmRSS: the current one)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="lengths divided by 4")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("t", "b", "h", "dh", "window"):
        parser.add_argument(f"--{name}", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(_child(opts)))
        return
    scale = 4 if opts.quick else 1
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, gloo, one thread per process")
    communication(scale)
    memory_and_time(scale)


if __name__ == "__main__":
    main()
