# SPDX-License-Identifier: Apache-2.0
"""Waiting in asyncio: `await op`, gather, wait_for, failures, and a loop
that watches c.fileno() itself."""

import asyncio

import numpy as np
import pytest

import devq
from conftest import SLOW


def test_await_op(conn):
    async def main():
        x = conn.array(np.arange(1024, dtype=np.float32))
        y = conn.zeros((1024,), np.float32)
        r = await conn.submit("saxpy_f32", a=2.0, x=x, y=y)
        assert r.status == "ok" and r.point == (0, 1)
        return y

    y = asyncio.run(main())
    assert np.array_equal(y, 2 * np.arange(1024, dtype=np.float32))


def test_gather_and_other_tasks_run(conn):
    ticks = []

    async def ticker():
        for _ in range(1000):
            ticks.append(1)
            await asyncio.sleep(0.002)

    async def main():
        t = asyncio.ensure_future(ticker())
        ops = [conn.submit("spin", ns=100_000_000, queue=q) for q in range(1, 4)]
        rs = await asyncio.gather(*ops)
        t.cancel()
        return rs

    rs = asyncio.run(main())
    assert [r.point for r in rs] == [(1, 1), (2, 1), (3, 1)]
    assert all(r.timing.device_ns >= 100_000_000 for r in rs)
    # the loop was free while the ops ran
    assert len(ticks) >= 10
    # the reader was removed once nothing awaited
    assert conn._reader_loop is None


def test_await_failure_and_timeout(conn):
    async def main():
        with pytest.raises(devq.Error) as e:
            await conn.submit("spin", ns=10**15)
        assert e.value.code == "out_of_range"
        slow = conn.submit("spin", ns=500_000_000, queue=2)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(slow, 0.05)
        return await slow

    r = asyncio.run(main())
    assert r.timing.device_ns >= 500_000_000


def test_add_reader_on_fileno(conn):
    """The documented integration for one's own loop: add_reader(c.fileno(),
    c.poll) and done-callbacks."""
    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.add_reader(conn.fileno(), conn.poll)
        try:
            ops = [conn.submit("spin", ns=1_000_000) for _ in range(20)]
            left = set(ops)

            def cb(op):
                left.discard(op)
                if not left and not done.done():
                    done.set_result(True)

            for op in ops:
                op.add_done_callback(cb)
            await asyncio.wait_for(done, 20 * SLOW)
        finally:
            loop.remove_reader(conn.fileno())
        return ops

    ops = asyncio.run(main())
    assert [(op.queue, op.point) for op in ops] == [(0, i) for i in range(1, 21)]
    assert all(op.result().status == "ok" for op in ops)
