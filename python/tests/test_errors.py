# SPDX-License-Identifier: Apache-2.0
"""Every error path: arguments refused before anything is sent (with the
signature), failures the daemon reports (devq.Error with .code), codes,
timeouts, closed and unreachable connections, asynchronous errors."""

import ctypes
import os

import numpy as np
import pytest

import devq
from conftest import SLOW

SAXPY = "saxpy_f32(n:u64, a:f32, x:in f32[n], y:inout f32[n])"


def nothing_sent(c):
    """The daemon saw no op and no queue of this session."""
    s = c.status().session
    return s.ops_completed == 0 and s.ops_in_flight == 0 and s.queues == 0


def arrays(c, n=16):
    x = c.array(np.arange(n, dtype=np.float32))
    y = c.zeros((n,), np.float32)
    return x, y


def test_unknown_executable(conn):
    with pytest.raises(ValueError, match=r"unknown executable 'saxpy_f16'.*saxpy_f32"):
        conn.submit("saxpy_f16", a=1.0)
    assert nothing_sent(conn)


def test_wrong_dtype(conn):
    x, y = arrays(conn)
    x64 = conn.array(np.arange(16, dtype=np.float64))
    with pytest.raises(TypeError) as e:
        conn.submit("saxpy_f32", a=2.0, x=x64, y=y)
    assert SAXPY in str(e.value) and "float32" in str(e.value) and "float64" in str(e.value)
    assert nothing_sent(conn)


def test_array_too_small_for_n(conn):
    x, y = arrays(conn, 16)
    with pytest.raises(ValueError) as e:
        conn.submit("saxpy_f32", n=17, a=2.0, x=x, y=y)
    assert SAXPY in str(e.value) and "needs 68 bytes" in str(e.value)
    # a view is as large as it says, whatever the buffer behind it
    with pytest.raises(ValueError, match="needs 64 bytes, the array has 32"):
        conn.submit("saxpy_f32", a=2.0, x=x, y=y[:8], n=16)
    assert nothing_sent(conn)


def test_n_not_inferable(conn):
    x = conn.array(np.zeros(16, np.float32))
    y = conn.array(np.zeros(12, np.float32))
    with pytest.raises(ValueError, match=r"cannot infer n: x has 16 elements, y has 12"):
        conn.submit("saxpy_f32", a=2.0, x=x, y=y)
    # explicit n within both is fine
    conn.submit("saxpy_f32", a=2.0, x=x, y=y, n=12).result(timeout=10 * SLOW)


def test_missing_and_unknown_arguments(conn):
    x, y = arrays(conn)
    with pytest.raises(TypeError, match=r"missing argument 'a'.*" + r"saxpy_f32\(n:u64"):
        conn.submit("saxpy_f32", x=x, y=y)
    with pytest.raises(TypeError, match=r"missing array argument 'y'"):
        conn.submit("saxpy_f32", a=1.0, x=x)
    with pytest.raises(TypeError, match=r"unexpected argument 'z'.*saxpy_f32\(n:u64"):
        conn.submit("saxpy_f32", a=1.0, x=x, y=y, z=1)
    assert nothing_sent(conn)


def test_scalar_types_and_ranges(conn):
    x, y = arrays(conn)
    with pytest.raises(TypeError, match="'a' \\(f32\\) needs a number"):
        conn.submit("saxpy_f32", a="2", x=x, y=y)
    with pytest.raises(TypeError, match="'n' \\(u64\\) needs an integer"):
        conn.submit("saxpy_f32", a=1.0, x=x, y=y, n=1.5)
    d = conn.zeros((4,), np.uint32)
    with pytest.raises(ValueError, match="'value' \\(u32\\) = -1 out of range"):
        conn.submit("fill_u32", value=-1, dst=d)
    with pytest.raises(ValueError, match="out of range"):
        conn.submit("fill_u32", value=1 << 32, dst=d)
    with pytest.raises(TypeError, match="needs a number, got bool"):
        conn.submit("fill_u32", value=True, dst=d)
    assert nothing_sent(conn)
    # numpy scalars are numbers
    conn.submit("fill_u32", value=np.uint32(7), dst=d).result(timeout=10 * SLOW)
    assert list(d) == [7, 7, 7, 7]


def test_arrays_not_in_shared_buffers(conn, daemon):
    x, y = arrays(conn)
    plain = np.zeros(16, np.float32)
    with pytest.raises(ValueError, match="not in a shared buffer of this connection"):
        conn.submit("saxpy_f32", a=1.0, x=plain, y=y)
    with pytest.raises(TypeError, match="expected an array"):
        conn.submit("saxpy_f32", a=1.0, x=[1.0, 2.0], y=y)
    with devq.connect(daemon.sock) as other:
        theirs = other.zeros((16,), np.float32)
        with pytest.raises(ValueError, match="not in a shared buffer of this connection"):
            conn.submit("saxpy_f32", a=1.0, x=theirs, y=y)
    big = conn.zeros((16, 2), np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        conn.submit("saxpy_f32", a=1.0, x=big[:, 0], y=y)
    ro = y[:]
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        conn.submit("saxpy_f32", a=1.0, x=x, y=ro)
    assert nothing_sent(conn)


def test_copy_and_fill_arguments(conn):
    a = conn.zeros((16,), np.float32)
    b = conn.zeros((8,), np.float32)
    with pytest.raises(ValueError, match="source has 64 bytes, destination 32"):
        conn.copy(b, a)
    with pytest.raises(ValueError, match="do not fit"):
        conn.copy(b, a, nbytes=64)
    with pytest.raises(ValueError, match="repeating 32-bit pattern"):
        conn.fill(conn.zeros((4,), np.float64), 1.5)
    with pytest.raises(ValueError, match="multiples of 4"):
        conn.fill(conn.zeros((3,), np.uint8), 1)
    assert nothing_sent(conn)


def test_daemon_failure_raised_by_result(conn):
    """The daemon's admin maximum bounds `ns`: out_of_range, from result()."""
    op = conn.submit("spin", ns=10**15)
    with pytest.raises(devq.Error) as e:
        op.result(timeout=10 * SLOW)
    err = e.value
    assert err.code == "out_of_range"
    assert "maximum op duration" in err.message
    assert (err.queue, err.point) == (0, 1)
    assert op.done() and op.exception() is err
    assert "out_of_range" in repr(op)


def test_sticky_failure_dependency_and_reset(conn):
    bad = conn.submit("spin", ns=10**15, queue=3)
    later = conn.submit("spin", ns=0, queue=3)          # same queue: inherits it
    other = conn.submit("spin", ns=0, queue=4, wait=[bad])  # waits on it
    for op in (bad, later, other):
        assert isinstance(op.exception(timeout=10 * SLOW), devq.Error)
    assert bad.exception().code == "out_of_range"
    assert later.exception().code == "dependency_failed"
    assert other.exception().code == "dependency_failed"
    conn.reset_queue(3)
    assert conn.submit("spin", ns=0, queue=3).result(timeout=10 * SLOW).status == "ok"


def test_every_code_named_as_libdevq_names_it():
    lib = ctypes.CDLL(devq.LIBRARY)
    lib.devq_code_name.restype = ctypes.c_char_p
    for i, name in enumerate(devq.CODES):
        assert lib.devq_code_name(i).decode() == name
    assert lib.devq_code_name(len(devq.CODES)).decode() == "unknown"
    for i, name in enumerate(devq.CODES):
        e = devq.Error(name, "m")
        assert e.code == name and e.message == "m" and str(e) == name + ": m"


def test_timeout(conn):
    op = conn.submit("spin", ns=300_000_000)
    with pytest.raises(TimeoutError):
        op.result(timeout=0.01)
    assert not op.done()
    assert op.result(timeout=10 * SLOW).timing.device_ns >= 300_000_000


def test_unreachable_daemon(tmp_path):
    with pytest.raises(devq.Error) as e:
        devq.connect(str(tmp_path / "nothing.sock"))
    assert e.value.code == "unavailable"
    assert "nothing.sock" in e.value.message


def test_closed_connection(daemon):
    c = devq.connect(daemon.sock)
    c.close()
    c.close()  # harmless
    assert c.closed
    with pytest.raises(devq.Error, match="closed") as e:
        c.submit("spin", ns=0)
    assert e.value.code == "unavailable"


def test_close_without_wait_cancels(daemon):
    c = devq.connect(daemon.sock)
    op = c.submit("spin", ns=200_000_000)
    c.close(wait=False)
    assert op.exception().code == "cancelled"


def test_asynchronous_errors(conn):
    """A queue opened with a priority the daemon does not have: the refusal
    arrives asynchronously, and errors() returns it."""
    conn.open_queue(9, priority=7)
    conn.submit("spin", ns=0, queue=1).result(timeout=10 * SLOW)  # a round of messages
    errs = conn.errors()
    assert errs and errs[0].code == "invalid_argument"
    assert errs[0].queue == 9
    assert conn.errors() == []


def test_daemon_gone_fails_ops_in_flight():
    from conftest import Daemon

    d = Daemon()
    c = devq.connect(d.sock)
    op = c.submit("spin", ns=2_000_000_000)
    d.proc.kill()
    d.proc.wait()
    err = op.exception(timeout=10 * SLOW)
    assert err.code == "unavailable"
    with pytest.raises(devq.Error) as e:
        c.submit("spin", ns=0)
    assert e.value.code == "unavailable"
    c.close()
    os.system("rm -rf " + d.dir)


def _my_deadline_exceeded(c):
    return [t.deadline_exceeded for t in c.status().tenants if t.uid == os.getuid()][0]


def test_deadline_passed_never_runs(conn):
    """deadline= of 5 ms behind 50 ms of work: deadline_exceeded naming the
    client's deadline, and the fill never ran; its queue and an op waiting
    on it fail dependency_failed; the tenant counts it.  500 ms: it runs."""
    before = _my_deadline_exceeded(conn)
    x = conn.zeros((1024,), np.uint32)
    spin = conn.submit("spin", ns=50_000_000, queue=7)
    late = conn.submit("fill_u32", value=7, dst=x, queue=7, deadline=0.005)
    after = conn.submit("spin", ns=0, queue=7)
    other = conn.submit("spin", ns=0, queue=8, wait=[late])
    assert spin.result(timeout=10 * SLOW).status == "ok"
    err = late.exception(timeout=10 * SLOW)
    assert isinstance(err, devq.Error) and err.code == "deadline_exceeded", err
    assert "deadline of 5000 us" in err.message
    assert after.exception(timeout=10 * SLOW).code == "dependency_failed"
    assert other.exception(timeout=10 * SLOW).code == "dependency_failed"
    assert not x.any(), "the op past its deadline ran"
    assert _my_deadline_exceeded(conn) == before + 1
    conn.reset_queue(7)
    conn.submit("spin", ns=50_000_000, queue=7)
    ok = conn.fill(x, 9, queue=7, deadline=0.5)
    assert ok.result(timeout=10 * SLOW).status == "ok"
    assert (x == 9).all()


def test_deadline_in_batches(conn):
    """In a batch, ops with and without deadlines side by side, after a
    batch that had none and before one whose only deadline op comes last
    (the options array is reused: no stale deadline may leak)."""
    x = conn.zeros((256,), np.uint32)
    y = conn.zeros((256,), np.uint32)
    with conn.batch():
        conn.submit("spin", ns=0, queue=9)
    with conn.batch():
        conn.submit("spin", ns=50_000_000, queue=9)
        late = conn.fill(x, 5, queue=9, deadline=0.005)
        free = conn.fill(y, 6, queue=10)
        conn.submit("spin", ns=0, queue=10, deadline=30)
    assert late.exception(timeout=10 * SLOW).code == "deadline_exceeded"
    assert free.result(timeout=10 * SLOW).status == "ok"
    assert not x.any() and (y == 6).all()
    conn.reset_queue(9)
    with conn.batch():
        a = conn.submit("spin", ns=20_000_000, queue=9)
        b = conn.fill(x, 4, queue=9)  # the slot that held the 5 ms deadline
        c = conn.fill(y, 3, queue=10, deadline=30)
    for op in (a, b, c):
        assert op.result(timeout=10 * SLOW).status == "ok"
    assert (x == 4).all() and (y == 3).all()


@pytest.mark.parametrize("bad,exc", [(0, ValueError), (-1, ValueError),
                                     (float("nan"), ValueError), (float("inf"), ValueError),
                                     ("1", TypeError), (True, TypeError)])
def test_deadline_refused_locally(conn, bad, exc):
    x = conn.zeros((16,), np.uint32)
    with pytest.raises(exc, match="deadline"):
        conn.submit("spin", ns=0, deadline=bad)
    with pytest.raises(exc, match="deadline"):
        conn.fill(x, 1, deadline=bad)
    assert nothing_sent(conn)
