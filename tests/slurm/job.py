# SPDX-License-Identifier: Apache-2.0
"""What the jobs of make check-slurm run (tests/slurm/check.sh), as the
job's user, through the socket the SPANK plugin gave them in $DEVQ_SOCKET.

  job.py work              a saxpy, its result checked, through each socket
                           of $DEVQ_SOCKETS
  job.py hold FILE [BYTES] work, then keep a buffer and wait for FILE to
                           exist; then (with BYTES) ask for a shared buffer
                           of BYTES, printing why it was refused, and work
                           again (the job is alive and served all along)
  job.py exceed BYTES      ask for a shared buffer of BYTES: must be refused
                           with resource_exhausted (the job's memory cap)
  job.py orphan DIR N      leave behind, outside the job's processes, a
                           process holding a session with a 1 s op running
                           and N more of 1 s queued behind it (N+1 s in
                           all, unless evicted); then sleep until
                           cancelled.  What the orphan saw goes to DIR/orphan.
Every line printed starts with the node's name.
"""

import os
import sys
import time

import numpy as np

import devq

NODE = os.environ.get("SLURMD_NODENAME", "?")


def say(*a):
    print(NODE, *a, flush=True)


def saxpy(c, n=4096):
    x = c.array(np.arange(n, dtype=np.float32))
    y = c.zeros((n,), np.float32)
    y[:] = 1.0
    c.submit("saxpy_f32", a=2.0, x=x, y=y).result(timeout=30)
    want = 2.0 * np.arange(n, dtype=np.float32) + 1.0
    if not np.array_equal(y, want):
        raise SystemExit(f"{NODE} saxpy: wrong result {y[:4]}")
    return float(y.sum())


def main():
    mode = sys.argv[1]
    sock = os.environ.get("DEVQ_SOCKET", "")
    if mode == "orphan":
        return orphan(sys.argv[2], int(sys.argv[3]))
    with devq.connect() as c:
        if mode == "work":
            # Each further GPU's tenant socket serves too.
            for other in os.environ.get("DEVQ_SOCKETS", "").split(",")[1:]:
                with devq.connect(other) as o:
                    saxpy(o)
            say("OK", os.environ.get("SLURM_JOB_ID"), sock, saxpy(c),
                os.environ.get("DEVQ_SOCKETS", ""))
        elif mode == "hold":
            keep = c.zeros((1 << 20,), np.uint8)
            say("READY", os.environ.get("SLURM_JOB_ID"), sock, saxpy(c))
            end = time.monotonic() + 120
            while not os.path.exists(sys.argv[2]):
                if time.monotonic() > end:
                    raise SystemExit(f"{NODE} hold: {sys.argv[2]} never came")
                time.sleep(0.05)
            if len(sys.argv) > 3:
                try:
                    c.empty((int(sys.argv[3]),), np.uint8)
                    say("NOT-REFUSED")
                except devq.Error as e:
                    say("REFUSED", e.code, e.message)
            keep[:] = 7
            say("OK-AFTER", os.environ.get("SLURM_JOB_ID"), saxpy(c), int(keep[5]))
        elif mode == "exceed":
            try:
                c.empty((int(sys.argv[2]),), np.uint8)
            except devq.Error as e:
                say("REFUSED", e.code, e.message)
                return 0 if e.code == "resource_exhausted" else 1
            say("NOT-REFUSED")
            return 1
        else:
            raise SystemExit(f"job.py: unknown mode {mode}")
    return 0


def orphan(out_dir, queued):
    """A process the job's process tracking loses (double fork, new
    session): only devqd's eviction can end what it holds."""
    r, w = os.pipe()
    if os.fork():
        os.close(w)
        os.read(r, 1)          # the orphan is connected and its ops in
        say("ORPHANED", os.environ.get("SLURM_JOB_ID"))
        while True:
            time.sleep(60)
    os.close(r)
    os.setsid()
    if os.fork():
        os._exit(0)
    # As a daemon does: the job's output pipes would keep its step alive.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    log = open(os.path.join(out_dir, "orphan"), "w", buffering=1)
    log.write(f"pid {os.getpid()}\n")
    try:
        with devq.connect() as c:
            buf = c.zeros((4 << 20,), np.uint8)
            ops = [c.submit("spin_buf", ns=1_000_000_000, buf=buf)]
            ops += [c.submit("spin_buf", ns=1_000_000_000, buf=buf) for _ in range(queued)]
            log.write(f"submitted {time.time()}\n")
            time.sleep(0.2)         # the first op is running
            os.write(w, b"x")
            for op in ops:
                try:
                    op.result(timeout=60)
                    log.write("op ok\n")
                except devq.Error as e:
                    log.write(f"op {e.code}\n")
    except devq.Error as e:
        log.write(f"session {e.code}\n")
    log.write("end\n")
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
