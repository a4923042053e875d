#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A 3-layer MLP served to many processes through devq.

N client processes start at once; each builds the same model (weights from
a seeded generator), its own batch of inputs, and runs the forward pass
R times through devqd: per layer one gemm_f32_nt (y = x W^T, W stored
[out, in] as a linear layer keeps it) and one bias_act_f32 (bias, then ReLU
but after the last layer).  Each process checks its output against NumPy
(float64), and reports its throughput and its device time: the sum of its
ops' device_end - device_start from their completions.  The parent prints
each process's line, the total throughput, and each process's share of
all device time.

    examples/mlp/mlp.py                 # 4 processes, full sizes (#!/usr/bin/python3)
    examples/mlp/mlp.py --procs 2 --small --iters 2

Full sizes: batch 64, 1024 -> 4096 -> 4096 -> 1024.  Needs a devqd
listening (DEVQ_SOCKET or --socket) and the devq package on PYTHONPATH."""

import argparse
import multiprocessing as mp
import sys
import time

import numpy as np

import devq


def model(sizes, seed):
    rng = np.random.default_rng(seed)
    layers = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        w = (rng.standard_normal((fan_out, fan_in), dtype=np.float32) / np.sqrt(fan_in)).astype(
            np.float32)
        b = (rng.standard_normal(fan_out, dtype=np.float32) * 0.1).astype(np.float32)
        layers.append((w, b))
    return layers


def reference(x, layers):
    h = x.astype(np.float64)
    for i, (w, b) in enumerate(layers):
        h = h @ w.astype(np.float64).T + b
        if i + 1 < len(layers):
            h = np.maximum(h, 0.0)
    return h


def worker(rank, args, go, out):
    sizes = [args.width_in, args.hidden, args.hidden, args.width_in]
    layers = model(sizes, args.seed)
    x0 = np.random.default_rng(args.seed + 1 + rank).standard_normal(
        (args.batch, sizes[0]), dtype=np.float32)
    with devq.connect(args.socket) as c:
        x = c.array(x0)
        ws = [(c.array(w), c.array(b)) for w, b in layers]
        hs = [c.empty((args.batch, n), np.float32) for n in sizes[1:]]

        def forward():
            futs = []
            inp = x
            for i, ((w, b), h) in enumerate(zip(ws, hs)):
                futs.append(c.submit("gemm_f32_nt", alpha=1.0, beta=0.0, a=inp, b=w, c=h))
                futs.append(c.submit("bias_act_f32", act=1 if i + 1 < len(ws) else 0,
                                     bias=b, x=h))
                inp = h
            return [f.result(timeout=600) for f in futs]

        forward()  # warm: per-stream init (the BLAS pool), pages touched
        go.wait()
        t0 = time.monotonic()
        dev_ns = 0
        for _ in range(args.iters):
            dev_ns += sum(r.timing.device_ns for r in forward())
        wall = time.monotonic() - t0
        got = np.array(hs[-1], dtype=np.float64)
    want = reference(x0, layers)
    err = float(np.max(np.abs(got - want) / (np.abs(want) + 1e-2)))
    ok = bool(np.allclose(got, want, rtol=1e-3, atol=1e-3))
    flops = 2.0 * args.batch * sum(a * b for a, b in zip(sizes, sizes[1:])) * args.iters
    out.put((rank, ok, err, args.iters * args.batch / wall, flops / wall / 1e9, dev_ns, wall))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--socket", default=None)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--small", action="store_true",
                   help="batch 8, 64 -> 256 -> 256 -> 64 (a quick check)")
    args = p.parse_args()
    args.batch, args.width_in, args.hidden = (8, 64, 256) if args.small else (64, 1024, 4096)
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, go, out)) for r in range(args.procs)]
    for pr in procs:
        pr.start()
    time.sleep(0.5)
    go.set()
    res = sorted(out.get(timeout=3600) for _ in procs)
    for pr in procs:
        pr.join()
    total_dev = sum(r[5] for r in res) or 1
    print("mlp: %d processes, batch %d, %d -> %d -> %d -> %d, %d iterations each"
          % (args.procs, args.batch, args.width_in, args.hidden, args.hidden, args.width_in,
             args.iters))
    for rank, ok, err, sps, gf, dev, wall in res:
        print("process %d: %s (max rel err %.2e)  %.1f samples/s  %.1f GFLOP/s  "
              "device %.3f s of %.3f s  share %.1f%%"
              % (rank, "correct" if ok else "WRONG", err, sps, gf, dev / 1e9, wall,
                 100.0 * dev / total_dev))
    print("total: %.1f samples/s  %.1f GFLOP/s" % (sum(r[3] for r in res), sum(r[4] for r in res)))
    bad = [r[0] for r in res if not r[1] or any(pr.exitcode for pr in procs)]
    if bad:
        print("mlp: wrong output from process(es) %s" % bad, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
