# SPDX-License-Identifier: Apache-2.0
"""One connection per thread, enforced: another thread's call raises
devq.ThreadError instead of touching the handle; arrays dropped on other
threads are released by the owner; threads with their own connections
work side by side."""

import gc
import threading

import numpy as np
import pytest

import devq
from conftest import SLOW


def in_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: B902 - handed back to the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(60 * SLOW)
    assert not t.is_alive()
    return out


@pytest.mark.parametrize("call", [
    lambda c, op, x: c.submit("spin", ns=0),
    lambda c, op, x: c.array(np.zeros(4)),
    lambda c, op, x: c.poll(),
    lambda c, op, x: c.fileno(),
    lambda c, op, x: c.status(),
    lambda c, op, x: c.close(),
    lambda c, op, x: op.result(),
    lambda c, op, x: c.copy(x, x),
], ids=["submit", "array", "poll", "fileno", "status", "close", "result", "copy"])
def test_other_thread_refused(conn, call):
    x = conn.zeros((16,), np.float32)
    op = conn.submit("spin", ns=50_000_000)
    out = in_thread(lambda: call(conn, op, x))
    e = out.get("error")
    assert isinstance(e, devq.ThreadError) and isinstance(e, RuntimeError)
    assert "one connection per thread" in str(e)
    # the owner carries on unharmed
    assert op.result(timeout=10 * SLOW).status == "ok"
    assert conn.submit("spin", ns=0).result(timeout=10 * SLOW).point == (0, 2)


def test_done_op_readable_anywhere(conn):
    op = conn.submit("spin", ns=0)
    op.result(timeout=10 * SLOW)
    out = in_thread(lambda: (op.done(), op.result().status))
    assert out["value"] == (True, "ok")


def test_array_dropped_on_another_thread(conn):
    box = [conn.zeros((1 << 16,), np.uint8)]
    assert conn.status().session.buffers == 1

    def drop():
        box.clear()
        gc.collect()

    assert "error" not in in_thread(drop)
    conn.poll()  # the owner's next call releases it
    assert conn.status().session.buffers == 0


def test_thread_per_connection(daemon):
    def work(k):
        with devq.connect(daemon.sock, name="thread%d" % k) as c:
            n = 10000 + k
            x = c.array(np.arange(n, dtype=np.float32))
            y = c.array(np.full(n, k, dtype=np.float32))
            ops = [c.submit("saxpy_f32", a=1.0, x=x, y=y) for _ in range(5)]
            ops[-1].result(timeout=30 * SLOW)
            assert all(op.done() for op in ops)
            return bool(np.array_equal(y, 5 * np.arange(n, dtype=np.float32) + k))

    results = [None] * 4
    threads = []
    for k in range(4):
        def run(k=k):
            results[k] = work(k)
        t = threading.Thread(target=run)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(60 * SLOW)
    assert results == [True] * 4
