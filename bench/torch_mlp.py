#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A PyTorch MLP's forward through devq.torch.mode against torch's own, in
one process.

One devqd of this build on the CPU backend (started here, with this
process's CPUs, which are the cores its gemms use).  The model is
examples/torch_mlp.py's: torch.nn.Sequential 1024 -> 4096 -> 4096 -> 1024
with ReLU between, batch 64, float32.  torch runs it on its own copy of the
model with OPENBLAS_NUM_THREADS and torch.set_num_threads equal to devqd's
cores (set before OpenBLAS is loaded; the script refuses to run unless
torch's BLAS is OpenBLAS, from /proc/self/maps); devq runs the placed
model (devq.torch.place) on an input made by devq.torch.from_tensor, under
torch.no_grad() and devq.torch.mode, every linear and relu on devqd (the
script checks: no fallback, no copy, and the output allclose to torch's,
rtol 1e-4, atol 1e-5).

Interleaved rounds of one devq forward and one torch forward (the order
alternating), each timed call starting SETTLE (0.2) s after the previous
one ended: torch's OpenBLAS workers spin ~0.1 s after each call, and would
otherwise take the CPUs from the devq forward timed right after.  Medians,
samples/s and devq/torch (torch's median time / devq's: >= 1 means devq is
as fast).

usage: make bench-torch [TORCH_BENCH_ARGS='--rounds 21 --settle 0.2 --batch 64']
"""

import argparse
import os
import statistics
import sys
import time

# devqd's gemms use the CPUs it may run on (sched_getaffinity): this
# process's, which it inherits.  OpenBLAS reads its thread count when it is
# loaded (by NumPy or torch), so it is set before either is imported.
CORES = len(os.sched_getaffinity(0))
os.environ["OPENBLAS_NUM_THREADS"] = str(CORES)

import copy  # noqa: E402

import torch  # noqa: E402

import devq  # noqa: E402
import devq.torch as dt  # noqa: E402
from local_devqd import local_devqd, openblas_mapped  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from torch_mlp import build  # noqa: E402  (the example's model, the same one measured)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--settle", type=float, default=0.2,
                    help="seconds before each timed forward (0: back to back)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")],
                    default=[1024, 4096, 4096, 1024])
    ap.add_argument("--torch-threads", type=int, default=CORES,
                    help="torch.set_num_threads for its own ops (bias, relu; default: the "
                    "cores); OpenBLAS's threads stay the cores")
    args = ap.parse_args()
    torch.set_num_threads(args.torch_threads)
    model = build(args.sizes, 1)
    mine = copy.deepcopy(model)  # torch's own, in its own memory
    x0 = torch.randn(args.batch, args.sizes[0], generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = mine(x0)
    libs = openblas_mapped()
    if not libs:
        sys.exit("bench/torch_mlp.py: torch's BLAS is not OpenBLAS here (no libopenblas "
                 "mapped): apt-get install libopenblas0-pthread")
    with local_devqd("devq-torch-") as sock:
        with devq.connect(sock, name="bench-torch") as c:
            dt.place(model, c)
            x = dt.from_tensor(c, x0)
            with torch.no_grad(), dt.mode(c) as stats:
                got = model(x)
            if stats.fallbacks or stats.copies or stats.sent.get("linear") != len(args.sizes) - 1:
                sys.exit("bench/torch_mlp.py: not every op went to devq: %s" % stats)
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
                sys.exit("bench/torch_mlp.py: devq's output differs from torch's by %g"
                         % float((got - want).abs().max()))
            td, tt = [], []
            with torch.no_grad():
                for r in range(args.rounds):
                    for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                        if args.settle > 0:
                            time.sleep(args.settle)
                        t0 = time.perf_counter()
                        if which == 0:
                            with dt.mode(c):
                                model(x)
                            td.append(time.perf_counter() - t0)
                        else:
                            mine(x0)
                            tt.append(time.perf_counter() - t0)
            info = c.info.device
    md, mt = statistics.median(td), statistics.median(tt)
    print("MLP %s, batch %d, float32, %d interleaved rounds, %g s before each timed forward; "
          "devqd: %s; torch %s, OPENBLAS_NUM_THREADS=%d, torch threads %d, BLAS: %s"
          % ("-".join(str(s) for s in args.sizes), args.batch, args.rounds, args.settle, info,
             torch.__version__, CORES, torch.get_num_threads(), ", ".join(libs)))
    print("  devq   median %.2f ms  %.1f samples/s  (min %.2f, max %.2f)"
          % (md * 1e3, args.batch / md, min(td) * 1e3, max(td) * 1e3))
    print("  torch  median %.2f ms  %.1f samples/s  (min %.2f, max %.2f)"
          % (mt * 1e3, args.batch / mt, min(tt) * 1e3, max(tt) * 1e3))
    print("  devq / torch speed: %.2fx" % (mt / md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
