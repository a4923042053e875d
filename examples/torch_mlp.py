#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A PyTorch model served to several processes through one devqd.

Each of N processes builds the same torch.nn.Sequential (1024 -> 4096 ->
4096 -> 1024, ReLU between, weights from a seeded generator), places it in
devq memory (devq.torch.place: one copy of its float32 weights), makes its
own batch of 64 inputs there, and runs the forward pass R times inside
devq.torch.mode: every Linear becomes gemm_f32_nt + bias_act_f32 and every
ReLU a bias_act_f32, run by devqd for all the processes at once.  Each
process checks its output against torch's own forward of the same model
(torch.allclose, rtol 1e-4, atol 1e-5) and that nothing was copied or ran in
torch instead.  Then torch alone runs the same forward in one process with
OPENBLAS_NUM_THREADS equal to devqd's cores, for comparison.

    examples/torch_mlp.py --socket /tmp/devq.sock          # 4 processes (#!/usr/bin/python3)
    examples/torch_mlp.py --procs 2 --iters 3 --batch 16

Needs a devqd with the CPU backend listening (DEVQ_SOCKET or --socket),
the devq package (pip install, python3-devq, or PYTHONPATH=build/python)
and PyTorch (python3-torch).  Exits 1 when a process's output is wrong."""

import argparse
import multiprocessing as mp
import os
import re
import subprocess
import sys
import time

RTOL, ATOL = 1e-4, 1e-5


def build(sizes, seed):
    import torch

    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def inputs(args, rank):
    import torch

    g = torch.Generator().manual_seed(args.seed + 1 + rank)
    return torch.randn(args.batch, args.sizes[0], generator=g)


def worker(rank, args, go, out):
    try:
        out.put(run(rank, args, go))
    except BaseException:
        import traceback

        go.abort()  # the others and the parent stop waiting
        out.put((rank, False, False, float("nan"), None, {}, 0,
                 {"error": traceback.format_exc()}))


def run(rank, args, go):
    import torch
    import devq
    import devq.torch as dt

    # The reference forward is not timed: one thread, so N processes do
    # not fight over the cores devqd uses.
    torch.set_num_threads(1)
    model = build(args.sizes, args.seed)
    x0 = inputs(args, rank)
    with torch.no_grad():
        want = model(x0)
    nlinear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    with devq.connect(args.socket, name="torch_mlp%d" % rank) as c:
        dt.place(model, c)
        x = dt.from_tensor(c, x0)
        with torch.no_grad(), dt.mode(c):
            model(x)  # warm: pages touched, the result pool filled
        go.wait()  # all placed and warm: start together
        t0 = time.monotonic()
        for _ in range(args.iters):
            with torch.no_grad(), dt.mode(c) as stats:
                y = model(x)
        t1 = time.monotonic()
        err = float((y - want).abs().max())
        ok = bool(torch.allclose(y, want, rtol=RTOL, atol=ATOL))
        placed = stats.copies == 0 and not stats.fallbacks and \
            stats.sent.get("linear") == nlinear
    return (rank, ok, placed, err, (t0, t1), dict(stats.sent), stats.copies,
            dict(stats.fallbacks))


def cores(socket):
    """devqd's cores, as its CPU backend says in its device string."""
    import devq

    with devq.connect(socket, name="torch_mlp") as c:
        if c.info.backend != "cpu":
            return None
        m = re.search(r"\((\d+) cores\)", c.info.device)
        return int(m.group(1)) if m else None


def baseline(args):
    """torch's own forward in this process: samples/s (OPENBLAS_NUM_THREADS
    was set before torch loaded OpenBLAS)."""
    import torch

    torch.set_num_threads(args.threads)
    model = build(args.sizes, args.seed)
    x = inputs(args, 0)
    with torch.no_grad():
        model(x)
        t0 = time.monotonic()
        for _ in range(args.iters):
            model(x)
        wall = time.monotonic() - t0
    print("torch-baseline %.1f" % (args.iters * args.batch / wall), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", default=None, help="devqd's socket (default: $DEVQ_SOCKET)")
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--iters", type=int, default=10, help="timed forward passes per process")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")],
                   default=[1024, 4096, 4096, 1024], help="layer widths (default 1024,4096,4096,1024)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0,
                   help="BLAS threads of the torch baseline (default: devqd's cores)")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--baseline-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.baseline_only:
        baseline(args)
        return 0

    ctx = mp.get_context("spawn")  # no fork of a process with BLAS threads
    go = ctx.Barrier(args.procs + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, go, out)) for r in range(args.procs)]
    for pr in procs:
        pr.start()
    try:
        go.wait()
    except Exception:
        pass  # a process failed: its result says why
    results = []
    for _ in procs:
        results.append(out.get(timeout=1800))
    for pr in procs:
        pr.join()
    bad = 0
    spans = []
    for rank, ok, placed, err, span, sent, copies, fallbacks in sorted(results):
        good = ok and placed
        bad += not good
        rate = args.iters * args.batch / (span[1] - span[0]) if span else 0.0
        if span:
            spans.append(span)
        print("process %d: %s, max |devq - torch| %.2g, %.1f samples/s, sent %s, copies %d, "
              "fallbacks %s" % (rank, "correct" if good else "WRONG", err, rate, sent, copies,
                                fallbacks or "none"))
    # Throughput of all together: every sample over the time from the
    # first start to the last end (CLOCK_MONOTONIC is the same for all).
    total = 0.0
    if spans:
        total = len(spans) * args.iters * args.batch / (max(e for _, e in spans)
                                                         - min(b for b, _ in spans))
    print("devq: %d processes, %.1f samples/s in all" % (args.procs, total))
    if not args.no_baseline:
        n = args.threads or cores(args.socket) or os.cpu_count()
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(n))
        argv = [sys.executable, os.path.abspath(__file__), "--baseline-only", "--threads", str(n),
                "--iters", str(args.iters), "--batch", str(args.batch), "--seed", str(args.seed),
                "--sizes", ",".join(str(s) for s in args.sizes)]
        r = subprocess.run(argv, env=env, capture_output=True, text=True)
        m = re.search(r"torch-baseline ([\d.]+)", r.stdout)
        if r.returncode or not m:
            print("torch baseline failed: " + r.stdout + r.stderr)
            return 1
        rate = float(m.group(1))
        print("torch: 1 process, OPENBLAS_NUM_THREADS=%d, %.1f samples/s (devq's %d processes: "
              "%.2fx)" % (n, rate, args.procs, total / rate))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
