#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Python binding's cost per op, against the C client in the same run.

Against one devqd (started here unless --socket is given), interleaved
rounds of four measurements:

  py rtt     null op (spin ns=0): c.submit(...).result(), one at a time
  C rtt      the same with libdevq: devq_bench rttload N record
             (devq_submit + devq_wait for the completion record)
  py batch   N null ops submitted in batches of 64 (`with c.batch()`), at
             most 4096 in flight, one queue: first submit to last completion
  C batch    the same with libdevq: devq_bench load N 64
  ctypes rtt the round trip from Python with bare ctypes calls (devq_submit,
             devq_wait for the record) on a handle of its own: the floor of
             any binding in this interpreter, to tell the package's own
             code from the cost of calling C from Python at all

and reports the median over rounds of each, and the binding's overhead per
op: py - C (round trip), 1/py - 1/C (batched, µs per op), in wall-clock
time and in the client process's CPU time (user + system, from
getrusage; the C client's start-up is cancelled out by a run of 0 ops).
On a loaded machine the wall-clock round trip is mostly wake-up latency;
the CPU time per op is the binding's own cost.  JSON goes to
$DEVQ_BENCH_OUT/py.json (default build/bench).

usage: make bench-python [PY_BENCH_ARGS='--quick']
       PYTHONPATH=build/python DEVQ_BUILD=build /usr/bin/python3 bench/py_bench.py
           [--quick] [--rounds R] [--socket PATH]
"""

import argparse
import json
import os
import re
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import ctypes

import devq
import devq._lib as L

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


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def py_rtt(c, n):
    """(µs per op wall, µs per op CPU)"""
    sub = c.submit
    c0 = cpu_self()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        sub("spin", ns=0).result()
    t = time.perf_counter_ns() - t0
    return t / n / 1e3, (cpu_self() - c0) / n * 1e6


def py_batch(c, n, batch=64):
    """(ops/s, µs per op CPU)"""
    sub = c.submit
    ops = []
    c0 = cpu_self()
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
    return n * 1e9 / t, (cpu_self() - c0) / n * 1e6


class Raw:
    """A libdevq handle driven with bare ctypes calls."""

    def __init__(self, sock):
        dll = self.dll = devq._dll
        dll.devq_wait.restype = ctypes.c_int
        dll.devq_wait.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64,
                                  ctypes.c_int, ctypes.POINTER(L.Completion)]
        self.h = ctypes.c_void_p()
        if dll.devq_connect(sock.encode(), b"py_bench_raw", ctypes.byref(self.h)) < 0:
            sys.exit("py_bench: raw connect failed")
        lst, n = ctypes.POINTER(L.Exec)(), ctypes.c_size_t()
        dll.devq_exec_list(self.h, ctypes.byref(lst), ctypes.byref(n))
        spin = next(ctypes.pointer(lst[i]) for i in range(n.value) if lst[i].name == b"spin")
        self.args = (L.Arg * 1)()
        self.args[0].name = b"ns"
        self.args[0].type = L.ARG_U64
        self.op = L.Op(queue=1, kind=L.OP_KERNEL, exec=spin, args=self.args, nargs=1)
        dll.devq_queue_open_priority(self.h, 1, 0)

    def rtt(self, n):
        dll, h = self.dll, self.h
        sub, wait = dll.devq_submit, dll.devq_wait
        opref = ctypes.byref(self.op)
        pt = ctypes.c_uint64()
        ptref = ctypes.byref(pt)
        cm = L.Completion()
        cmref = ctypes.byref(cm)
        c0 = cpu_self()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            if sub(h, opref, 1, ptref) < 0 or wait(h, 1, pt.value, -1, cmref) < 0:
                sys.exit("py_bench: raw round trip failed")
        t = time.perf_counter_ns() - t0
        return t / n / 1e3, (cpu_self() - c0) / n * 1e6

    def close(self):
        self.dll.devq_disconnect(self.h)


def c_run(sock, *args):
    """(stdout, CPU seconds of the child)"""
    c0 = cpu_children()
    out = subprocess.run([BENCH, "--socket", sock, *args], check=True, capture_output=True,
                         text=True).stdout
    return out, cpu_children() - c0


def c_rtt(sock, n):
    out, cpu = c_run(sock, "rttload", str(n), "record")
    _, cpu0 = c_run(sock, "rttload", "0", "record")
    return float(re.search(r"([0-9.]+) us each", out).group(1)), (cpu - cpu0) / n * 1e6


def c_batch(sock, n):
    out, cpu = c_run(sock, "load", str(n), "64")
    _, cpu0 = c_run(sock, "load", "0", "64")
    return float(re.search(r"([0-9.]+) ops/s", out).group(1)), (cpu - cpu0) / n * 1e6


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
    keys = ("py rtt", "C rtt", "py batch", "C batch", "ctypes rtt")
    rows = {k: [] for k in keys}
    cpu = {k: [] for k in keys}
    load = [os.getloadavg()[0]]
    try:
        raw = Raw(sock)
        with devq.connect(sock, name="py_bench") as c:
            raw.rtt(200)
            py_rtt(c, 200)  # warm up: executables, queue, page faults
            py_batch(c, 2000)
            c_rtt(sock, 200)
            for r in range(rounds):
                for k, fn in (("py rtt", lambda: py_rtt(c, n_rtt)),
                              ("C rtt", lambda: c_rtt(sock, n_rtt)),
                              ("py batch", lambda: py_batch(c, n_batch)),
                              ("C batch", lambda: c_batch(sock, n_batch)),
                              ("ctypes rtt", lambda: raw.rtt(n_rtt))):
                    v, u = fn()
                    rows[k].append(v)
                    cpu[k].append(u)
                print("round %d/%d: py rtt %.2f us (%.2f CPU), C rtt %.2f us (%.2f CPU), "
                      "py batch %.0f ops/s (%.2f us CPU/op), C batch %.0f ops/s "
                      "(%.2f us CPU/op)" % (r + 1, rounds, rows["py rtt"][-1],
                                            cpu["py rtt"][-1], rows["C rtt"][-1],
                                            cpu["C rtt"][-1], rows["py batch"][-1],
                                            cpu["py batch"][-1], rows["C batch"][-1],
                                            cpu["C batch"][-1]), flush=True)
        raw.close()
    finally:
        if proc:
            proc.terminate()
            proc.wait()
    load.append(os.getloadavg()[0])
    med = {k: statistics.median(v) for k, v in rows.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    over_rtt = med["py rtt"] - med["C rtt"]
    over_batch = 1e6 / med["py batch"] - 1e6 / med["C batch"]
    over_rtt_cpu = mcpu["py rtt"] - mcpu["C rtt"]
    over_batch_cpu = mcpu["py batch"] - mcpu["C batch"]
    py = sys.version.split()[0]
    print()
    print("## Python binding vs C client: %d interleaved rounds (python %s, numpy %s, "
          "load %.1f -> %.1f)" % (rounds, py, __import__("numpy").__version__, *load))
    print("%-44s %10s %10s %10s" % ("(medians of rounds)", "Python", "C", "overhead"))
    print("%-44s %10.2f %10.2f %10.2f" % ("null-op round trip, us", med["py rtt"],
                                          med["C rtt"], over_rtt))
    print("%-44s %10.2f %10.2f %10.2f" % ("null-op round trip, client CPU us per op",
                                          mcpu["py rtt"], mcpu["C rtt"], over_rtt_cpu))
    print("%-44s %10.2f %10.2f %10.2f" % ("  bare ctypes calls: round trip, us",
                                          med["ctypes rtt"], med["C rtt"],
                                          med["ctypes rtt"] - med["C rtt"]))
    print("%-44s %10.2f %10.2f %10.2f" % ("  bare ctypes calls: client CPU us per op",
                                          mcpu["ctypes rtt"], mcpu["C rtt"],
                                          mcpu["ctypes rtt"] - mcpu["C rtt"]))
    print("%-44s %10.0f %10.0f" % ("batches of 64, ops/s", med["py batch"], med["C batch"]))
    print("%-44s %10.2f %10.2f %10.2f" % ("batches of 64, us per op", 1e6 / med["py batch"],
                                          1e6 / med["C batch"], over_batch))
    print("%-44s %10.2f %10.2f %10.2f" % ("batches of 64, client CPU us per op",
                                          mcpu["py batch"], mcpu["C batch"], over_batch_cpu))
    out = os.environ.get("DEVQ_BENCH_OUT", os.path.join(BUILD, "bench"))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "py.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "python": py, "rounds": rounds, "n_rtt": n_rtt, "n_batch": n_batch,
                   "rows": rows, "cpu_us_per_op": cpu, "median": med,
                   "median_cpu_us_per_op": mcpu, "overhead_rtt_us": over_rtt,
                   "overhead_batch_us": over_batch, "overhead_rtt_cpu_us": over_rtt_cpu,
                   "overhead_batch_cpu_us": over_batch_cpu, "load1": load}, f, indent=2)


if __name__ == "__main__":
    main()
