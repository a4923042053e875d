#!/usr/bin/python3
"""The Python binding's cost per op, against the C client in the same run.

Against one devqd (started here unless --socket is given), interleaved
rounds of four measurements:

  py rtt     null op (spin ns=0): c.submit(...).result(), one at a time
  C rtt      the same with libdevq: devq_bench rttload N record
             (devq_submit + devq_wait for the completion record)
  py batch   N null ops submitted in batches of 64 (`with c.batch()`), at
             most 4096 in flight, one queue: first submit to last completion
  C batch    the same with libdevq: devq_bench load N 64

and reports the median over rounds of each, and the binding's overhead per
op: py - C (round trip), 1/py - 1/C (batched, µs per op).  JSON goes to
$DEVQ_BENCH_OUT/py.json (default build/bench).

usage: make bench-python [PY_BENCH_ARGS='--quick']
       PYTHONPATH=build/python DEVQ_BUILD=build python3 bench/py_bench.py
           [--quick] [--rounds R] [--socket PATH]
"""

import argparse
import json
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import devq

BUILD = os.environ.get("DEVQ_BUILD", "build")
BENCH = os.path.join(BUILD, "bench", "devq_bench")
WINDOW = 4096


def start_daemon():
    d = tempfile.mkdtemp(prefix="devq-pybench-")
    sock = os.path.join(d, "devqd.sock")
    argv = [os.path.join(BUILD, "devqd"), "--socket", sock, "--backend", "cpu"]
    argv += shlex.split(os.environ.get("DEVQD_ARGS", ""))
    p = subprocess.Popen(argv, stderr=open(os.path.join(d, "devqd.log"), "wb"))
    for _ in range(1000):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            return p, sock
        except OSError:
            if p.poll() is not None:
                sys.exit("py_bench: devqd exited at start")
            time.sleep(0.01)
    sys.exit("py_bench: devqd did not start")


def py_rtt(c, n):
    sub = c.submit
    t0 = time.perf_counter_ns()
    for _ in range(n):
        sub("spin", ns=0).result()
    return (time.perf_counter_ns() - t0) / n / 1e3  # µs per op


def py_batch(c, n, batch=64):
    sub = c.submit
    ops = []
    t0 = time.perf_counter_ns()
    done = 0
    while done < n:
        k = min(batch, n - done)
        with c.batch():
            for _ in range(k):
                ops.append(sub("spin", ns=0))
        done += k
        if len(ops) >= WINDOW:
            ops[-WINDOW // 2].result()
            del ops[:-WINDOW // 2]
            c.poll()
    ops[-1].result()
    c.synchronize()
    t = time.perf_counter_ns() - t0
    return n * 1e9 / t  # ops/s


def c_run(sock, *args):
    out = subprocess.run([BENCH, "--socket", sock, *args], check=True, capture_output=True,
                         text=True).stdout
    return out


def c_rtt(sock, n):
    out = c_run(sock, "rttload", str(n), "record")
    return float(re.search(r"([0-9.]+) us each", out).group(1))


def c_batch(sock, n):
    out = c_run(sock, "load", str(n), "64")
    return float(re.search(r"([0-9.]+) ops/s", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--socket")
    a = ap.parse_args()
    rounds = a.rounds or (5 if a.quick else 10)
    n_rtt = 300 if a.quick else 2000
    n_batch = 20000 if a.quick else 100000
    if not os.access(BENCH, os.X_OK):
        sys.exit("py_bench: %s missing (make bench-build)" % BENCH)
    proc = None
    sock = a.socket
    if not sock:
        proc, sock = start_daemon()
    rows = {"py rtt": [], "C rtt": [], "py batch": [], "C batch": []}
    try:
        with devq.connect(sock, name="py_bench") as c:
            py_rtt(c, 200)  # warm up: executables, queue, page faults
            py_batch(c, 2000)
            c_rtt(sock, 200)
            for r in range(rounds):
                rows["py rtt"].append(py_rtt(c, n_rtt))
                rows["C rtt"].append(c_rtt(sock, n_rtt))
                rows["py batch"].append(py_batch(c, n_batch))
                rows["C batch"].append(c_batch(sock, n_batch))
                print("round %d/%d: py rtt %.2f us, C rtt %.2f us, py batch %.0f ops/s, "
                      "C batch %.0f ops/s" % (r + 1, rounds, rows["py rtt"][-1],
                                              rows["C rtt"][-1], rows["py batch"][-1],
                                              rows["C batch"][-1]), flush=True)
    finally:
        if proc:
            proc.terminate()
            proc.wait()
    med = {k: statistics.median(v) for k, v in rows.items()}
    over_rtt = med["py rtt"] - med["C rtt"]
    over_batch = 1e6 / med["py batch"] - 1e6 / med["C batch"]
    py = sys.version.split()[0]
    print()
    print("## Python binding vs C client: %d interleaved rounds (python %s, numpy %s)"
          % (rounds, py, __import__("numpy").__version__))
    print("%-34s %12s %12s" % ("", "Python", "C"))
    print("%-34s %12.2f %12.2f" % ("null-op round trip, us (median)", med["py rtt"],
                                   med["C rtt"]))
    print("%-34s %12.0f %12.0f" % ("batches of 64, ops/s (median)", med["py batch"],
                                   med["C batch"]))
    print("%-34s %12.2f %12.2f" % ("batches of 64, us per op", 1e6 / med["py batch"],
                                   1e6 / med["C batch"]))
    print("binding overhead per op: %.2f us on a round trip, %.2f us batched"
          % (over_rtt, over_batch))
    out = os.environ.get("DEVQ_BENCH_OUT", os.path.join(BUILD, "bench"))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "py.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "python": py, "rounds": rounds, "n_rtt": n_rtt, "n_batch": n_batch,
                   "rows": rows, "median": med, "overhead_rtt_us": over_rtt,
                   "overhead_batch_us": over_batch,
                   "load1": os.getloadavg()[0]}, f, indent=2)


if __name__ == "__main__":
    main()
