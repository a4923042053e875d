# SPDX-License-Identifier: Apache-2.0
"""Buffer lifetime: a buffer is released when its arrays (every view) and
every op using it are done, not before; arrays outlive the connection; no
fds or daemon buffers leak; device buffers, copies and fills."""

import gc
import os
import time

import numpy as np

import devq
from conftest import SLOW


def session(c):
    return c.status().session


def settle(c, buffers=0):
    """Polls until this side freed all but `buffers` buffers (BufferReleased
    arrives asynchronously)."""
    deadline = time.monotonic() + 10 * SLOW
    while c.buffers > buffers and time.monotonic() < deadline:
        gc.collect()
        c.poll()
        time.sleep(0.001)
    return c.buffers


def test_released_after_last_op(conn):
    c = conn
    x = c.zeros((1 << 20,), np.uint8)
    assert session(c).buffers == 1
    op = c.submit("spin_buf", ns=300_000_000, buf=x)   # n inferred: 1 MiB
    del x
    gc.collect()
    c.poll()
    # the op in flight still holds the buffer: not even asked to release
    assert not op.done()
    s = session(c)
    assert s.buffers == 1 and s.bytes_mapped == 1 << 20
    assert c.buffers == 1
    op.result(timeout=10 * SLOW)
    c.poll()                                        # sends the release
    assert session(c).buffers == 0
    assert settle(c) == 0                           # BufferReleased came back


def test_views_keep_the_buffer(conn):
    c = conn
    x = c.zeros((4096,), np.uint8)
    v = x[100:200]
    w = x.view(np.uint32)[10:20]
    op = c.submit("spin_buf", ns=1_000_000, buf=x)
    del x
    op.result(timeout=10 * SLOW)
    del op
    gc.collect()
    c.poll()
    assert session(c).buffers == 1
    assert (v == 1).all() and (w == 0x01010101).all()  # spin_buf added 1 to every byte
    del v
    gc.collect()
    c.poll()
    assert session(c).buffers == 1                  # w still views it
    del w
    gc.collect()
    c.poll()
    assert session(c).buffers == 0


def test_view_offset_is_the_argument_offset(conn):
    c = conn
    x = c.zeros((64,), np.float32)
    a = c.array(np.arange(64, dtype=np.float32))
    c.submit("saxpy_f32", a=1.0, x=a[32:], y=x[16:48]).result(timeout=10 * SLOW)
    assert (x[:16] == 0).all() and (x[48:] == 0).all()
    assert np.array_equal(x[16:48], np.arange(32, 64, dtype=np.float32))


def test_arrays_outlive_the_connection(daemon):
    with devq.connect(daemon.sock) as c:
        y = c.array(np.arange(10, dtype=np.int32))
        x = c.zeros((16,), np.uint32)
        c.submit("fill_u32", value=5, dst=x)
    # closing waited for the fill; the arrays are plain memory now
    assert list(x) == [5] * 16
    y[:] = 3
    assert y.sum() == 30


def test_no_leak_over_many_buffers(conn):
    c = conn
    fds = len(os.listdir("/proc/self/fd"))
    for i in range(300):
        a = c.array(np.full(1000, i, dtype=np.uint32))
        op = c.submit("fill_u32", value=i + 1, dst=a[:500])
        if i % 50 == 0:
            op.result(timeout=10 * SLOW)
            assert a[0] == i + 1 and a[999] == i
        del a, op
    c.synchronize()
    assert settle(c) == 0
    s = session(c)
    assert (s.buffers, s.bytes_mapped) == (0, 0)
    assert len(os.listdir("/proc/self/fd")) <= fds


def test_device_buffers_copy_fill(conn):
    c = conn
    n = 4096
    host = c.array(np.arange(n, dtype=np.float32))
    d = c.device_empty((n,), np.float32)
    assert d.nbytes == 4 * n and d.shape == (n,) and len(d) == n
    up = c.copy(d, host)
    c.submit("saxpy_f32", a=3.0, x=host, y=d, wait=[up])
    back = c.zeros((n,), np.float32)
    c.copy(back, d).result(timeout=10 * SLOW)
    assert np.array_equal(back, np.float32(4.0) * np.arange(n, dtype=np.float32))
    c.fill(d, np.float32(0.5)).result(timeout=10 * SLOW)
    c.copy(back, d).result(timeout=10 * SLOW)
    assert (back == 0.5).all()
    c.fill(back[:8], 0).result(timeout=10 * SLOW)
    assert (back[:8] == 0).all() and (back[8:] == 0.5).all()
    u8 = c.zeros((16,), np.uint8)
    c.fill(u8, 7).result(timeout=10 * SLOW)
    assert (u8 == 7).all()
    with_dtype = c.device_empty(4, np.float64)
    try:
        c.submit("saxpy_f32", a=1.0, x=host[:4], y=with_dtype)
    except TypeError as e:
        assert "float64" in str(e)
    else:
        raise AssertionError("a float64 device array passed for f32")
    del d, with_dtype
    gc.collect()
    c.poll()
    assert session(c).buffers == 3  # host, back, u8
