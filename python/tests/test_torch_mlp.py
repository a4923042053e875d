# SPDX-License-Identifier: Apache-2.0
"""examples/torch_mlp.py at full size (1024 -> 4096 -> 4096 -> 1024, batch
64): 4 processes place the model and run it through devq.torch.mode on one
devqd; each output equals torch's own forward (allclose, rtol 1e-4, atol
1e-5), with every linear sent to devq, no copy and no fallback; then the
torch baseline in one process.  Skips, saying so, without PyTorch."""

import os
import subprocess
import sys

import pytest

from conftest import SLOW, Daemon

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch_mlp.py")

try:
    import torch  # noqa: F401
except ImportError:
    torch = None


@pytest.mark.skipif(torch is None,
                    reason="SKIP: no PyTorch: apt-get install python3-torch (make deps-torch)")
def test_four_processes_correct():
    # Under valgrind (make check-valgrind) the daemon's gemms run tens of
    # times slower: the same model at a sixteenth of the widths there.
    small = ["--sizes", "64,256,256,64"] if os.environ.get("DEVQ_VALGRIND") else []
    d = Daemon()
    try:
        r = subprocess.run([sys.executable, EXAMPLE, "--socket", d.sock, "--procs", "4",
                            "--iters", "1", *small], capture_output=True, text=True,
                           timeout=600 * SLOW)
    finally:
        assert d.stop() == 0, d.tail()
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    lines = [line for line in out.splitlines() if line.startswith("process ")]
    assert len(lines) == 4, out
    for line in lines:
        assert ": correct," in line and "'linear': 3" in line and "'relu': 2" in line \
            and "copies 0" in line and "fallbacks none" in line, line
    assert "devq: 4 processes" in out and "torch: 1 process, OPENBLAS_NUM_THREADS=" in out, out
