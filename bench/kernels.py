#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The CPU backend's streaming kernels through devq against NumPy, one run.

Against one devqd on the CPU backend (started here unless --socket is
given), interleaved rounds; in each round, for each kernel, one call through
devq and one NumPy baseline, the order alternating from round to round so
both see the same minutes of machine noise:

  saxpy_f32       c.submit("saxpy_f32", a=a, x=x, y=y).result()
                  against  y += np.float32(a) * x
  vadd_f32        c.submit("vadd_f32", a=x, b=y, c=z).result()
                  against  np.add(x, y, out=z)
  reduce_sum_f32  c.submit("reduce_sum_f32", x=x, out=s).result()
                  against  x.sum()

devq's time is the wall clock from submit to the completion seen by this
process (validation, hand-over, the kernel on a worker, the completion
record); its arrays are shared buffers (c.empty), NumPy's are made by NumPy
(np.random.Generator), the same n of float32 each.  Printed: the medians
over rounds, the effective bandwidth (bytes the kernel must move: 12 n for
saxpy and vadd, 4 n for the reduction), and devq's speed relative to
NumPy's (NumPy's time / devq's: above 1 is faster than NumPy).  The
results are checked once against NumPy before timing (saxpy bit for bit
against a float64 fused reference, vadd exactly, the reduction within its
bound), so a broken kernel cannot post a good figure.  JSON goes to
$DEVQ_BENCH_OUT/kernels.json (default build/bench).

--devqd PATH runs another daemon binary against the same NumPy (a build
of an earlier tree: how bench/RESULTS.md compares before and after).

usage: make bench-kernels [KERNEL_BENCH_ARGS='--quick']
       PYTHONPATH=build/python DEVQ_BUILD=build /usr/bin/python3 bench/kernels.py
           [--quick] [--rounds R] [--n N] [--socket PATH | --devqd PATH]
"""

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import devq

BUILD = os.environ.get("DEVQ_BUILD", "build")


def start_daemon(devqd=None):
    d = tempfile.mkdtemp(prefix="devq-kbench-")
    sock = os.path.join(d, "devqd.sock")
    argv = [devqd or os.path.join(BUILD, "devqd"), "--socket", sock, "--backend", "cpu"]
    argv += shlex.split(os.environ.get("DEVQD_ARGS", ""))
    p = subprocess.Popen(argv, stderr=open(os.path.join(d, "devqd.log"), "wb"))
    for _ in range(1000):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            return p, sock
        except OSError:
            if p.poll() is not None:
                sys.exit("kernels.py: devqd exited at start (%s)" % os.path.join(d, "devqd.log"))
            time.sleep(0.01)
    sys.exit("kernels.py: devqd did not start")


def timed(fn):
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e6  # ms


def check(c, n, rng):
    """One call of each kernel through devq against NumPy, on fresh data."""
    a = np.float32(0.75)
    x = c.array(rng.standard_normal(n, dtype=np.float32))
    y = c.array(rng.standard_normal(n, dtype=np.float32))
    # float64 holds a*x exactly (24 + 24 bits); the one rounding of the
    # float64 sum to float32 then equals fmaf's except in double-rounding
    # ties, which random normal data of this size does not hit in practice:
    # any difference is reported, not hidden.
    want = (np.float64(a) * x.astype(np.float64) + y.astype(np.float64)).astype(np.float32)
    c.submit("saxpy_f32", a=float(a), x=x, y=y).result()
    bad = np.count_nonzero(y.view(np.uint32) != want.view(np.uint32))
    if bad:
        sys.exit("kernels.py: saxpy_f32 differs from the fused reference in %d elements" % bad)
    z = c.empty((n,), np.float32)
    c.submit("vadd_f32", a=x, b=y, c=z).result()
    if not np.array_equal(z, x + y):
        sys.exit("kernels.py: vadd_f32 differs from NumPy")
    s = c.empty((1,), np.float32)
    c.submit("reduce_sum_f32", x=x, out=s).result()
    ref = x.astype(np.float64).sum()
    bound = n * np.finfo(np.float32).eps * np.abs(x.astype(np.float64)).sum()
    if abs(float(s[0]) - ref) > bound:
        sys.exit("kernels.py: reduce_sum_f32 %r, reference %r, bound %r" % (s[0], ref, bound))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 M elements, 5 rounds")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--n", type=int)
    ap.add_argument("--socket")
    ap.add_argument("--devqd", help="the daemon to start (default BUILD/devqd)")
    o = ap.parse_args()
    n = o.n or ((1 << 20) if o.quick else (16 << 20))
    rounds = o.rounds or (5 if o.quick else 21)
    for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if v in os.environ:
            print("note: %s=%s is set (NumPy's BLAS is tuned by it)" % (v, os.environ[v]))

    daemon = None
    sock = o.socket
    if sock is None:
        daemon, sock = start_daemon(o.devqd)
    try:
        res, device = run(sock, n, rounds)
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait()

    print("devqd: %s" % device)
    print("n = %d float32 (%d MiB per array), medians of %d interleaved rounds, %s"
          % (n, n * 4 >> 20, rounds, time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())))
    print("%-15s %10s %10s %9s %9s %8s" % ("kernel", "devq ms", "numpy ms", "devq GB/s",
                                           "numpy GB/s", "ratio"))
    for k, r in res.items():
        print("%-15s %10.3f %10.3f %9.2f %10.2f %7.2fx" % (
            k, r["devq_ms"], r["numpy_ms"], r["devq_gbs"], r["numpy_gbs"], r["ratio"]))
    out = os.environ.get("DEVQ_BENCH_OUT", os.path.join(BUILD, "bench"))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "kernels.json"), "w") as f:
        json.dump({"n": n, "rounds": rounds, "device": device, "kernels": res}, f, indent=1)


def run(sock, n, rounds):
    rng = np.random.default_rng(27)
    with devq.connect(sock, "kernels-bench") as c:
        check(c, min(n, 1 << 20), rng)
        a = 1e-3
        # devq's operands: shared buffers.  NumPy's: arrays NumPy made.
        dx = c.array(rng.standard_normal(n, dtype=np.float32))
        dy = c.array(rng.standard_normal(n, dtype=np.float32))
        dz = c.zeros((n,), np.float32)
        ds = c.zeros((1,), np.float32)
        nx = rng.standard_normal(n, dtype=np.float32)
        ny = rng.standard_normal(n, dtype=np.float32)
        nz = np.zeros(n, np.float32)
        fa = np.float32(a)

        def np_saxpy():
            nonlocal ny
            ny += fa * nx

        cases = {
            "saxpy_f32": (lambda: c.submit("saxpy_f32", a=a, x=dx, y=dy).result(),
                          np_saxpy, 12),
            "vadd_f32": (lambda: c.submit("vadd_f32", a=dx, b=dy, c=dz).result(),
                         lambda: np.add(nx, ny, out=nz), 12),
            "reduce_sum_f32": (lambda: c.submit("reduce_sum_f32", x=dx, out=ds).result(),
                               lambda: nx.sum(), 4),
        }
        t = {k: ([], []) for k in cases}
        for k, (d, p, _) in cases.items():  # warm-up: pages, caches, the worker
            d()
            p()
        for r in range(rounds):
            for k, (d, p, _) in cases.items():
                if r % 2:
                    t[k][1].append(timed(p))
                    t[k][0].append(timed(d))
                else:
                    t[k][0].append(timed(d))
                    t[k][1].append(timed(p))
        res = {}
        for k, (_, _, bpe) in cases.items():
            dm, nm = statistics.median(t[k][0]), statistics.median(t[k][1])
            res[k] = {"devq_ms": dm, "numpy_ms": nm, "ratio": nm / dm,
                      "devq_gbs": bpe * n / dm / 1e6, "numpy_gbs": bpe * n / nm / 1e6,
                      "devq_rounds_ms": t[k][0], "numpy_rounds_ms": t[k][1]}
        return res, c.info.device


if __name__ == "__main__":
    main()
