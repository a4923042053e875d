#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""gemm_f32 through devq against NumPy's matmul, one run.

One devqd of this build on the CPU backend (started here).  Baseline:
np.matmul(A, B, out=C) on float32 arrays made by NumPy, with NumPy's BLAS
being OpenBLAS: NumPy on Debian calls libblas.so.3, which the alternatives
system points at OpenBLAS once libopenblas0-pthread is installed; this
script refuses to run unless a libopenblas is mapped into this process
after the first matmul (/proc/self/maps), so the ratio always means
"devq's OpenBLAS gemm against NumPy's OpenBLAS gemm".

  single  m = n = k = N (1024): interleaved rounds of one devq gemm_f32
          (submit to the completion seen by this process) and one NumPy
          matmul; medians, GFLOP/s (2 N^3 / time) and devq/NumPy.  Each
          timed call starts SETTLE (0.2) s after the previous one ended:
          NumPy's OpenBLAS pthread workers spin ~0.1 s after each call
          (OpenBLAS's default thread timeout), and a devq gemm timed right
          after a matmul shared the two CPUs with them (this process used
          4-7 ms of CPU during a 14 ms devq gemm, against 1.5 ms with the
          pause).  --settle 0 measures back to back.
  multi   P (4) client processes at once, each R (30) gemms through
          devq, against one process alone doing the same (each ready and
          warm before a common start): aggregate GFLOP/s from the first
          start to the last end, alternated 3 times, medians, and the
          ratio to the lone process's.

usage: make bench-gemm [GEMM_BENCH_ARGS='--n 1024 --rounds 15 --settle 0.2 --procs 4 --reps 30']
"""

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

import numpy as np

import devq
from local_devqd import local_devqd, openblas_mapped


def one_client(sock, n, reps, ready, go, out):
    rng = np.random.default_rng(os.getpid())
    with devq.connect(sock) as c:
        a = c.array(rng.standard_normal((n, n), dtype=np.float32))
        b = c.array(rng.standard_normal((n, n), dtype=np.float32))
        cc = c.zeros((n, n), np.float32)
        c.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=b, c=cc).result(timeout=600)
        ready.put(1)
        go.wait()
        t0 = time.monotonic()
        for _ in range(reps):
            c.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=b, c=cc).result(timeout=600)
        out.put((t0, time.monotonic()))


def multi(sock, n, reps, procs):
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    ps = [ctx.Process(target=one_client, args=(sock, n, reps, ready, go, out))
          for _ in range(procs)]
    for p in ps:
        p.start()
    for _ in ps:  # every client connected, its buffers made, one gemm done
        ready.get(timeout=600)
    go.set()
    spans = [out.get(timeout=3600) for _ in ps]
    for p in ps:
        p.join()
    # CLOCK_MONOTONIC is one clock for every process: from the first start
    # to the last end.
    wall = max(e for _, e in spans) - min(s for s, _ in spans)
    return procs * reps * 2.0 * n ** 3 / wall / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--reps", type=int, default=30, help="gemms per process in the multi part")
    ap.add_argument("--settle", type=float, default=0.2,
                    help="seconds before each timed call of the single part (0: none)")
    ap.add_argument("--multi-rounds", type=int, default=3,
                    help="alone / all at once, alternated this many times (medians; "
                    "0: the single part only)")
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(1)
    A = rng.standard_normal((n, n), dtype=np.float32)
    B = rng.standard_normal((n, n), dtype=np.float32)
    C = np.empty((n, n), np.float32)
    np.matmul(A, B, out=C)
    libs = openblas_mapped()
    if not libs:
        sys.exit("bench/gemm.py: NumPy's BLAS is not OpenBLAS here (no libopenblas mapped): "
                 "apt-get install libopenblas0-pthread, which points libblas.so.3 at it")
    with local_devqd("devq-gemm-") as sock:
        with devq.connect(sock) as c:
            a, b, cc = c.array(A), c.array(B), c.zeros((n, n), np.float32)
            c.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=b, c=cc).result(timeout=600)
            np.testing.assert_allclose(np.asarray(cc), C, rtol=1e-3, atol=1e-3 * n ** 0.5)
            td, tn = [], []
            for r in range(args.rounds):
                order = (0, 1) if r % 2 == 0 else (1, 0)
                for which in order:
                    if args.settle > 0:
                        time.sleep(args.settle)
                    t0 = time.perf_counter()
                    if which == 0:
                        c.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=b, c=cc).result(
                            timeout=600)
                        td.append(time.perf_counter() - t0)
                    else:
                        np.matmul(A, B, out=C)
                        tn.append(time.perf_counter() - t0)
        md, mn = statistics.median(td), statistics.median(tn)
        gf = lambda t: 2.0 * n ** 3 / t / 1e9
        print("gemm_f32 %dx%dx%d, %d rounds, %g s before each timed call, NumPy's BLAS: %s, "
              "%d CPUs" % (n, n, n, args.rounds, args.settle, ", ".join(libs), os.cpu_count()))
        print("  devq   median %.2f ms  %.1f GFLOP/s" % (md * 1e3, gf(md)))
        print("  NumPy  median %.2f ms  %.1f GFLOP/s" % (mn * 1e3, gf(mn)))
        print("  devq / NumPy speed: %.2fx" % (mn / md))
        alone, many = [], []
        for _ in range(args.multi_rounds):
            alone.append(multi(sock, n, args.reps, 1))
            many.append(multi(sock, n, args.reps, args.procs))
        if not alone:  # --multi-rounds 0: the single part only
            return 0
        a, m = statistics.median(alone), statistics.median(many)
        print("  1 process alone: %.1f GFLOP/s; %d at once: %.1f GFLOP/s aggregate (%.2fx); "
              "medians of %d alternated rounds (alone %s, at once %s)"
              % (a, args.procs, m, m / a, args.multi_rounds,
                 " ".join("%.0f" % v for v in alone), " ".join("%.0f" % v for v in many)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
