#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Isolation beside heavy work: a latency tenant's tail next to a gemm
tenant, on one or two CPU devqd builds side by side (bench/iso.sh).

  L  this process (root): one gemm_f32 of m=8, n=k=1024 every 10 ms, each
     timed from submit to its result seen here.
  B  a child that became user nobody (another tenant): keeps two 1024^3
     gemm_f32 in flight (queues 0 and 1) while it is told to run; paused,
     it submits nothing more and says so once its ops completed (it is
     paused and resumed, never restarted, so its arrays stay warm).

  H  (--high-trials, after the blocks) root's 64^3 gemm_f32 on a
     high-priority queue, one every 20 ms, beside B's child running
     --high-gemm (4096x4096x3072: about 4 s here) gemms back to back;
     timed from devqd's receipt to the device's end of the 64^3 gemm (the
     op's own stamps; it runs in about 0.05 ms, and the base stamps its
     start before its wait for cores).  The base daemon gets
     --high-base-trials of them (each may wait for the whole gemm there).

Blocks of --block (2) seconds alternate between "alone" (B paused and
drained) and "beside" (B running), and, with --base-devqd, between the two
daemons (this build's first), until each condition of this build's daemon
has --samples (3000) L samples and each of the base's --base-samples (300:
beside B, the base's L waits for whole gemms and gets a few per block).  Prints L's p50/p99 alone and beside per
daemon, their differences, and B's gemms per second while beside, as the
ratio of this build's to the base's: both measured in the same run,
interleaved, so the machine's drift falls on both.  Also the kernel, the
CPU model and OpenBLAS's core name (what the figures depend on).

usage: bench/iso.py --devqd build/devqd [--base-devqd OLD/devqd]
                    [--samples 3000] [--base-samples 300] [--block 2]
                    [--devqd-args '--slice-us N']
                    [--high-trials 50] [--high-base-trials 5] [--json FILE]
"""

import argparse
import ctypes
import ctypes.util
import json
import multiprocessing as mp
import os
import pwd
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import devq

L_PERIOD = 0.010


def quantile(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def start_devqd(path, tmp, name, extra=()):
    sock = os.path.join(tmp, name + ".sock")
    log = open(os.path.join(tmp, name + ".log"), "w")
    d = subprocess.Popen([path, "--backend", "cpu", "--socket", sock, "--allow-users", "nobody",
                          "--priority-streams", "1", *extra], stdout=log,
                         stderr=subprocess.STDOUT)
    for _ in range(200):
        if os.path.exists(sock):
            break
        if d.poll() is not None:
            sys.exit("iso: %s exited %d (log: %s)" % (path, d.returncode, log.name))
        time.sleep(0.05)
    os.chmod(tmp, 0o755)
    os.chmod(sock, 0o777)
    return d, sock


def b_tenant(sock, n, run, drained, done, ready):
    """B: two n^3 gemms in flight while run is 1 (as user nobody)."""
    pw = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)
    rng = np.random.default_rng(7)
    with devq.connect(sock) as c:
        a = c.array(rng.standard_normal((n, n), dtype=np.float32))
        b = c.array(rng.standard_normal((n, n), dtype=np.float32))
        cs = [c.zeros((n, n), np.float32) for _ in range(2)]
        ready.value = 1
        while run.value >= 0:
            if run.value == 0:
                drained.value = 1
                time.sleep(0.005)
                continue
            drained.value = 0
            ops = [(q, c.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=b, c=cs[q], queue=q))
                   for q in range(2)]
            while ops:
                q, op = ops.pop(0)
                op.result(timeout=600)
                done.value += 1
                if run.value == 1:
                    ops.append((q, c.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=b, c=cs[q],
                                            queue=q)))


def h_tenant(sock, mnk, run, started):
    """H's other user: --high-gemm gemms back to back while run is 1."""
    pw = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)
    m, n, k = mnk
    with devq.connect(sock) as c:
        a = c.zeros((m, k), np.float32)
        b = c.zeros((k, n), np.float32)
        cc = c.zeros((m, n), np.float32)
        while run.value == 1:
            op = c.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=b, c=cc, queue=0)
            time.sleep(0.2)  # surely started
            started.value += 1
            r = op.result(timeout=600)
            started.value += 1
            if run.value == 1:
                print("iso: H's gemm took %.2f s of device time" % (r.timing.device_ns / 1e9),
                      flush=True)


class Daemon:
    def __init__(self, name, path, tmp, n, extra=()):
        self.name = name
        self.proc, self.sock = start_devqd(path, tmp, name, extra)
        self.run = mp.Value("i", 0)
        self.drained = mp.Value("i", 1)
        self.done = mp.Value("q", 0)
        ready = mp.Value("i", 0)
        self.b = mp.get_context("fork").Process(
            target=b_tenant, args=(self.sock, n, self.run, self.drained, self.done, ready))
        self.b.start()
        self.conn = devq.connect(self.sock)
        rng = np.random.default_rng(3)
        self.la = self.conn.array(rng.standard_normal((8, 1024), dtype=np.float32))
        self.lb = self.conn.array(rng.standard_normal((1024, 1024), dtype=np.float32))
        self.lc = self.conn.zeros((8, 1024), np.float32)
        while not ready.value:
            if not self.b.is_alive():
                sys.exit("iso: B on %s ended before it was ready" % name)
            time.sleep(0.01)
        self.lat = {"alone": [], "beside": []}
        self.b_gemms = 0
        self.b_seconds = 0.0

    def l_op(self):
        t0 = time.monotonic()
        self.conn.submit("gemm_f32", alpha=1.0, beta=0.0, a=self.la, b=self.lb,
                         c=self.lc).result(timeout=600)
        return time.monotonic() - t0

    def block(self, cond, seconds):
        if cond == "beside":
            self.run.value = 1
            time.sleep(0.05)  # B's first two ops are in
        else:
            self.run.value = 0
            while not self.drained.value:
                time.sleep(0.005)
        d0, t0 = self.done.value, time.monotonic()
        nxt = t0
        while time.monotonic() - t0 < seconds:
            self.lat[cond].append(self.l_op())
            nxt += L_PERIOD
            pause = nxt - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                nxt = time.monotonic()
        if cond == "beside":
            self.b_gemms += self.done.value - d0
            self.b_seconds += time.monotonic() - t0
            self.run.value = 0

    def high(self, trials, mnk):
        """Receipt to device end of root's 64^3 gemms on a high-priority
        queue beside another user's big gemms (ms, one per trial)."""
        run, started = mp.Value("i", 1), mp.Value("i", 0)
        h = mp.get_context("fork").Process(target=h_tenant, args=(self.sock, mnk, run, started))
        h.start()
        self.conn.open_queue(9, priority=1)
        rng = np.random.default_rng(5)
        a = self.conn.array(rng.standard_normal((64, 64), dtype=np.float32))
        c = self.conn.zeros((64, 64), np.float32)
        for _ in range(5):  # timed alone first: no first-op cost below
            self.conn.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=a, c=c, queue=9).result(60)
        while started.value == 0:
            time.sleep(0.01)
        out = []
        while len(out) < trials:
            if started.value % 2 == 0:  # between two of H's gemms: wait for the next
                time.sleep(0.01)
                continue
            r = self.conn.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=a, c=c,
                                 queue=9).result(timeout=600)
            out.append((r.timing.device_end - r.timing.received) / 1e6)
            time.sleep(0.02)
        run.value = 0
        h.join(600)
        return out

    def stop(self):
        self.run.value = -1
        self.b.join(120)
        self.conn.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    core = "?"
    for name in ("openblas", "openblas64"):
        path = ctypes.util.find_library(name)
        if path:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            core = lib.openblas_get_corename().decode()
            break
    return {"kernel": os.uname().release, "cpu": model, "cpus": os.cpu_count(),
            "openblas_core": core}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devqd", required=True)
    ap.add_argument("--base-devqd")
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--base-samples", type=int, default=300,
                    help="L samples per condition the base daemon needs (its L waits for "
                         "whole gemms beside B: a few per block)")
    ap.add_argument("--block", type=float, default=2.0)
    ap.add_argument("--n", type=int, default=1024, help="B's gemm size (n^3)")
    ap.add_argument("--devqd-args", default="",
                    help="more options for this build's devqd (e.g. '--slice-us 5000')")
    ap.add_argument("--high-trials", type=int, default=50)
    ap.add_argument("--high-base-trials", type=int, default=5)
    ap.add_argument("--high-gemm", default="4096,4096,3072", help="H's other user's gemm m,n,k")
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("iso: run as root (B becomes user nobody: another tenant)")
    tmp = tempfile.mkdtemp(prefix="devq-iso-")
    ds = []
    try:
        ds.append(Daemon("this", args.devqd, tmp, args.n, args.devqd_args.split()))
        if args.base_devqd:
            ds.append(Daemon("base", args.base_devqd, tmp, args.n))
        for d in ds:  # warm: the first ops load OpenBLAS and fault pages in
            for _ in range(20):
                d.l_op()
        def need(d):
            return args.samples if d.name == "this" else args.base_samples
        while any(len(d.lat[c]) < need(d) for d in ds for c in d.lat):
            for d in ds:
                for cond in ("alone", "beside"):
                    d.block(cond, args.block)
        out = {"machine": machine(), "samples": args.samples, "block_s": args.block}
        m = out["machine"]
        print("iso: %s, %s (%d CPUs), OpenBLAS core %s" % (m["kernel"], m["cpu"], m["cpus"],
                                                           m["openblas_core"]))
        for d in ds:
            r = {}
            for cond in ("alone", "beside"):
                xs = d.lat[cond]
                r[cond] = {"n": len(xs), "p50_ms": 1e3 * quantile(xs, 0.5),
                           "p99_ms": 1e3 * quantile(xs, 0.99)}
            r["p99_diff_ms"] = r["beside"]["p99_ms"] - r["alone"]["p99_ms"]
            r["p50_ratio"] = r["beside"]["p50_ms"] / r["alone"]["p50_ms"]
            r["b_gemms_per_s"] = d.b_gemms / d.b_seconds if d.b_seconds else 0.0
            out[d.name] = r
            print("%-5s L alone p50 %.2f p99 %.2f ms (%d) | beside p50 %.2f p99 %.2f ms (%d) | "
                  "p99 +%.2f ms, p50 %.2fx | B %.2f gemms/s" % (
                      d.name, r["alone"]["p50_ms"], r["alone"]["p99_ms"], r["alone"]["n"],
                      r["beside"]["p50_ms"], r["beside"]["p99_ms"], r["beside"]["n"],
                      r["p99_diff_ms"], r["p50_ratio"], r["b_gemms_per_s"]))
        if len(ds) == 2 and out["base"]["b_gemms_per_s"]:
            out["b_ratio"] = out["this"]["b_gemms_per_s"] / out["base"]["b_gemms_per_s"]
            print("B's throughput, this / base: %.3f" % out["b_ratio"])
        mnk = tuple(int(x) for x in args.high_gemm.split(","))
        for d in ds:
            trials = args.high_trials if d.name == "this" else args.high_base_trials
            if not trials:
                continue
            xs = d.high(trials, mnk)
            r = {"n": len(xs), "median_ms": statistics.median(xs), "max_ms": max(xs)}
            out[d.name]["high"] = r
            print("%-5s H: 64^3 on the high-priority stream beside another user's %s gemm, "
                  "receipt to end: median %.2f ms, max %.2f ms (%d trials)" % (
                      d.name, "x".join(map(str, mnk)), r["median_ms"], r["max_ms"], r["n"]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        for d in ds:
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
