# SPDX-License-Identifier: Apache-2.0
"""What the Python benchmarks share: whether this process's BLAS is
OpenBLAS (the comparisons are fair only when both sides run the same
library), and a CPU devqd of the build on a socket of its own."""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time


def openblas_mapped():
    """The OpenBLAS libraries mapped into this process, [] when none."""
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "openblas" in line.split()[-1]})


@contextlib.contextmanager
def local_devqd(prefix):
    """Starts $DEVQ_BUILD/devqd (default build/) on the CPU backend on a
    socket in a new directory; yields the socket's path once it exists (or
    after 10 s, when connecting will say why); stops devqd with SIGTERM and
    removes the directory after."""
    build = os.environ.get("DEVQ_BUILD", "build")
    tmp = tempfile.mkdtemp(prefix=prefix)
    sock = os.path.join(tmp, "s")
    d = subprocess.Popen([os.path.join(build, "devqd"), "--backend", "cpu", "--socket", sock],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        yield sock
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
