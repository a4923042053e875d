# SPDX-License-Identifier: Apache-2.0
"""The binding's contract (the example that opens devq's docstring), verbatim,
against a daemon the test starts."""

import numpy as np

import devq


def test_contract(daemon):
    # devq.connect() finds the daemon through $DEVQ_SOCKET (the fixture sets it).
    with devq.connect() as c:                       # socket: argument, $DEVQ_SOCKET, or the default
        print(c.executables())                      # {"saxpy_f32": "n:u64, a:f32, x:in f32[n], y:inout f32[n]", ...}
        x = c.array(np.arange(1 << 20, dtype=np.float32))   # a shared buffer holding a copy; an ndarray view of it
        y = c.empty((1 << 20,), np.float32)                 # a shared buffer, uninitialised
        y[:] = 1.0
        op = c.submit("saxpy_f32", a=2.0, x=x, y=y)         # n inferred from the arrays when omitted; returns at once
        r = op.result(timeout=5)                            # blocks; raises devq.Error (with .code, e.g. "out_of_range") on failure
        assert r.status == "ok" and r.timing.device_ns > 0 and r.point == (0, 1)
        assert np.array_equal(y, np.float32(2.0) * np.arange(1 << 20, dtype=np.float32) + np.float32(1.0))
        s = c.submit("reduce_sum_f32", x=y, out=c.empty((1,), np.float32), queue=1, wait=[op])  # queues open on first use

    # Beyond the contract: what it promises about the objects it used.
    assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
    # Leaving the with-block waited for s; its result is the sum of y.
    rs = s.result()
    assert rs.point == (1, 1) and rs.status == "ok"
    # Arrays outlive the connection: plain memory now, still readable.
    assert y[3] == np.float32(7.0)


def test_contract_results_checked(conn):
    """The same flow, reading the reduction's output and the timing."""
    c = conn
    ex = c.executables()
    assert ex["saxpy_f32"] == "n:u64, a:f32, x:in f32[n], y:inout f32[n]"
    n = 1 << 16
    x = c.array(np.arange(n, dtype=np.float32))
    y = c.empty((n,), np.float32)
    y[:] = 1.0
    op = c.submit("saxpy_f32", a=2.0, x=x, y=y)
    out = c.empty((1,), np.float32)
    s = c.submit("reduce_sum_f32", x=y, out=out, queue=1, wait=[op])
    rs = s.result(timeout=30)
    expect = (np.float32(2.0) * np.arange(n, dtype=np.float32) + np.float32(1.0)).sum(dtype=np.float64)
    assert abs(float(out[0]) - expect) / expect < 1e-5
    t = op.result().timing
    assert t.client_submit <= t.received <= t.handoff <= t.device_start <= t.device_end
    assert t.device_end <= t.observed <= t.client_received
    assert t.total_ns == t.submit_ns + t.queued_ns + t.device_ns + t.sync_ns
    # the second op waited for the first
    assert rs.timing.device_start >= t.device_end
