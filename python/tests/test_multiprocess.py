# SPDX-License-Identifier: Apache-2.0
"""Several Python processes share one daemon at once; each verifies its
own results, and the daemon saw every session."""

import json
import os
import subprocess
import sys

import devq
from conftest import SLOW

WORKER = r'''
import json, sys
import numpy as np
import devq

k = int(sys.argv[1])
rng = np.random.default_rng(k)
n = 50000 + 1000 * k
with devq.connect(name="worker%d" % k) as c:
    x = c.array(rng.random(n, dtype=np.float32))
    y = c.array(rng.random(n, dtype=np.float32))
    y0 = y.copy()
    a = np.float32(k + 0.5)
    ops = []
    for i in range(20):
        ops.append(c.submit("saxpy_f32", a=a, x=x, y=y, queue=i % 2,
                            wait=ops[-1:]))
    out = c.empty((1,), np.float32)
    total = c.submit("reduce_sum_f32", x=y, out=out, queue=2, wait=[ops[-1]])
    checksum = c.zeros((1,), np.uint64)
    ck = c.submit("checksum", data=x, out=checksum, queue=3)
    total.result(timeout=60)
    ck.result(timeout=60)
    expect = y0.copy()
    for i in range(20):
        expect = np.float32(a) * x + expect  # same op order, float32 throughout
    ok = bool(np.allclose(y, expect, rtol=1e-5))
    rel = abs(float(out[0]) - float(y.sum(dtype=np.float64))) / float(y.sum(dtype=np.float64))
    print(json.dumps({"k": k, "ok": ok, "rel": rel, "session": c.info.session,
                      "checksum": int(checksum[0])}))
'''


def test_processes_share_one_daemon(daemon, conn):
    before = conn.status().sessions_total
    env = dict(os.environ, DEVQ_SOCKET=daemon.sock)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(k)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120 * SLOW)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert [r["k"] for r in results] == [0, 1, 2, 3]
    assert all(r["ok"] for r in results), results
    assert all(r["rel"] < 1e-4 for r in results), results
    assert len({r["session"] for r in results}) == 4
    assert len({r["checksum"] for r in results}) == 4  # different data, different sums
    assert conn.status().sessions_total >= before + 4
