# SPDX-License-Identifier: Apache-2.0
"""What a new user runs into in the first hour (issue 47): Ctrl-C during a
wait, fork(), running out of fds or buffers, a refused op's queue, and a
daemon restart.  Each loses nothing and says what to do."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import devq
from conftest import SLOW, Daemon


def test_ctrl_c_during_result_keeps_the_completion(conn):
    # Ctrl-C while result() blocks is seen while the op runs (waits come
    # back to Python in slices), and the completion is not lost: waiting
    # again returns the op's real result as soon as it ends.
    op = conn.submit("spin", ns=1_000_000_000)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            op.result(timeout=30 * SLOW)
    finally:
        timer.join()
    assert time.monotonic() - t0 < 0.7 * SLOW, "Ctrl-C was seen only after the op ended"
    r = op.result(timeout=10 * SLOW)
    assert r.status == "ok"
    assert (time.monotonic_ns() - r.timing.device_end) < 1e9 * SLOW
    # synchronize() the same way.
    op = conn.submit("spin", ns=400_000_000)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            conn.synchronize(timeout=30 * SLOW)
    finally:
        timer.join()
    conn.synchronize(timeout=10 * SLOW)
    assert op.done() and op.result().status == "ok" and conn.in_flight == 0


def test_an_interrupted_dispatch_is_redone(conn):
    # The window the interrupt hits: libdevq handed the record over, the
    # op is not completed yet.  The next wait dispatches it.
    op = conn.submit("spin", ns=0)
    nc = devq._dll.devq_next_completion
    assert nc(conn._h, conn._cmpl_ref, int(10_000 * SLOW)) == 0
    assert not op._done
    assert op.result(timeout=10 * SLOW).status == "ok"
    op = conn.submit("spin", ns=0)
    assert nc(conn._h, conn._cmpl_ref, int(10_000 * SLOW)) == 0
    assert conn.poll() == 0 and op.done()


def test_fork_child_is_refused_parent_keeps_working(conn):
    x = conn.array(np.arange(16, dtype=np.float32))
    y = conn.zeros(16, np.float32)
    assert conn.submit("saxpy_f32", a=1.0, x=x, y=y).result(timeout=10 * SLOW)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every call refused, nothing sent
        signal.alarm(int(20 * SLOW))  # a call that went through may block
        os.close(r)
        msgs = []
        for call in (lambda: conn.empty(4, np.float32),
                     lambda: conn.submit("saxpy_f32", a=1.0, x=x, y=y),
                     conn.poll, lambda: conn.synchronize(timeout=5 * SLOW)):
            try:
                call()
                msgs.append("no error")
            except devq.ForkError as e:
                msgs.append(str(e))
        # libdevq refuses too, whoever calls it.
        rc = devq._dll.devq_poll(conn._h)
        msgs.append("%d %s" % (rc, devq._dll.devq_last_error(conn._h).decode()))
        msgs.append("%d" % devq._dll.devq_fd(conn._h))
        os.write(w, "\n".join(msgs).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = f.read().split("\n")
    assert os.waitpid(pid, 0)[1] == 0
    want = "a devq connection cannot cross fork(); call devq.connect() in the child"
    assert got[:4] == [want] * 4, got
    assert got[4].startswith("-10 a devq connection cannot cross fork()"), got  # -ECHILD
    assert got[5] == "-10", got  # devq_fd: the parent's socket, not the child's to watch
    # The parent is unaffected: new buffers (ids the child did not take), ops.
    z = conn.array(np.ones(16, np.float32))
    conn.submit("saxpy_f32", a=2.0, x=x, y=z).result(timeout=10 * SLOW)
    assert np.array_equal(z, 1 + 2 * np.arange(16, dtype=np.float32))
    assert conn.errors() == []


FD_SCRIPT = r'''
import resource, sys
import numpy as np
import devq

c = devq.connect(sys.argv[1])
arrays = [c.array(np.full(4, i, np.float32)) for i in range(600)]
out = c.empty(1, np.float32)
c.submit("reduce_sum_f32", x=arrays[-1], out=out).result(timeout=60)
assert out[0] == 4 * 599, out
try:
    while True:
        arrays.append(c.empty(4, np.float32))
except devq.Error as e:
    print(len(arrays), resource.getrlimit(resource.RLIMIT_NOFILE)[0], e)
'''


def test_600_arrays_at_ulimit_1024(daemon):
    # `ulimit -n 1024` sets the hard limit too: one fd per array, and a
    # clear error at the end.
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    p = subprocess.run([sys.executable, "-c", FD_SCRIPT, daemon.sock], preexec_fn=limit,
                       capture_output=True, text=True, timeout=120 * SLOW)
    assert p.returncode == 0, p.stderr
    n, lim, msg = p.stdout.split(" ", 2)
    assert int(n) > 900 and int(lim) == 1024, p.stdout
    assert "resource_exhausted: out of file descriptors (RLIMIT_NOFILE is 1024)" in msg
    assert "each devq shared array holds 1" in msg and "ulimit -n" in msg


def test_import_raises_the_soft_fd_limit(daemon):
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))
    code = "import resource, devq; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    p = subprocess.run([sys.executable, "-c", code], preexec_fn=limit,
                       capture_output=True, text=True, timeout=60 * SLOW)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "4096"


def test_10000_submits_without_waiting(conn):
    # Each op holds its buffer until its completion is read: submit and
    # the allocations read what has arrived, so a loop that never waits
    # stays under the daemon's buffer quota.
    y = conn.zeros(4, np.float32)
    for i in range(10_000):
        x = conn.array(np.ones(4, np.float32))
        conn.submit("saxpy_f32", a=1.0, x=x, y=y)
    conn.synchronize(timeout=60 * SLOW)
    assert np.array_equal(y, np.full(4, 10_000, np.float32))
    assert conn.errors() == []


def test_quota_refusal_names_unread_completions(daemon):
    d = Daemon("--quota-session-buffers", "8")
    try:
        with devq.connect(d.sock) as c:
            gate = c.submit("spin", ns=300_000_000)
            arrays = []
            for _ in range(7):
                arrays.append(c.array(np.ones(4, np.float32)))
                c.submit("saxpy_f32", a=1.0, x=arrays[-1], y=arrays[0], wait=[gate])
            del arrays[1:]  # dead arrays, held by ops not yet complete
            with pytest.raises(devq.Error) as e:
                arrays += [c.empty((4, 4), np.float32) for _ in range(2)]
            assert e.value.code == "resource_exhausted"
            assert "ops whose completion was not read" in e.value.message, e.value
            assert "c.poll() or c.synchronize()" in e.value.message
            c.synchronize(timeout=10 * SLOW)
    finally:
        assert d.stop() == 0


def test_failed_queue_error_names_reset_queue_and_point(conn):
    bad = conn.submit("spin", ns=10**15, queue=11)
    assert bad.exception(timeout=10 * SLOW).code == "out_of_range"
    later = conn.submit("spin", ns=0, queue=11)
    e = later.exception(timeout=10 * SLOW)
    assert e.code == "dependency_failed"
    assert "queue 11 failed at point %d" % bad.point in e.message, e
    assert "c.reset_queue(11)" in e.message, e
    conn.reset_queue(11)
    assert conn.submit("spin", ns=0, queue=11).result(timeout=10 * SLOW)


def test_failed_queue_error_is_the_same_when_the_failure_comes_later(conn):
    # The next op is submitted while the first still runs: devqd learns of
    # the failure when the next op is due, and says the same as above.
    gate = conn.submit("spin", ns=50 * 10**6, queue=12)
    bad = conn.submit("spin", ns=10**15, queue=12)
    later = conn.submit("spin", ns=0, queue=12)
    e = later.exception(timeout=10 * SLOW)
    assert e.code == "dependency_failed"
    assert "queue 12 failed at point %d" % bad.point in e.message, e
    assert "c.reset_queue(12)" in e.message, e
    assert gate.result(timeout=10 * SLOW)


def test_reconnect_after_daemon_restart(daemon):
    d = Daemon()
    try:
        c = devq.connect(d.sock)
        x = c.array(np.arange(8, dtype=np.float32))
        y = c.zeros(8, np.float32)
        c.submit("saxpy_f32", a=1.0, x=x, y=y, queue=2).result(timeout=10 * SLOW)
        assert d.stop(keep=True) == 0
        d = Daemon(sock=d.sock)
        with pytest.raises(devq.Error) as e:
            c.submit("saxpy_f32", a=1.0, x=x, y=y, queue=2).result(timeout=10 * SLOW)
            c.synchronize(timeout=10 * SLOW)
        assert e.value.code == "unavailable"
        assert "connection to devqd lost (stopped or restarted)" in e.value.message, e.value
        assert "c.reconnect()" in e.value.message
        c.reconnect(timeout=10 * SLOW)
        r = c.submit("saxpy_f32", a=2.0, x=x, y=y, queue=2).result(timeout=10 * SLOW)
        assert r.point == (2, 1)
        assert np.array_equal(y, 3 * np.arange(8, dtype=np.float32))
        c.close()
    finally:
        assert d.stop() == 0
