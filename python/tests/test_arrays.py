# SPDX-License-Identifier: Apache-2.0
"""Any array in devq memory is an argument: NumPy arrays and views,
memoryviews, objects with __array_interface__, DLPack producers and
PyTorch tensors, found by address with their whole extent inside one of
the session's shared buffers; the op reads and writes that very memory.
Outside devq memory, or running past a buffer's end, they are refused
saying how to allocate in devq memory; a wrong dtype or a non-contiguous
array is refused naming the argument.  DLPack views of devq arrays are
zero-copy both ways."""

import numpy as np
import pytest

from conftest import SLOW

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(
    torch is None, reason="SKIP: no PyTorch: apt-get install python3-torch (make deps-torch)")

N = 64
ALLOCATE = "allocate it in devq memory"


class Interface:
    """Only __array_interface__, as other array libraries export it."""

    def __init__(self, a):
        self.__array_interface__ = a.__array_interface__
        self._keep = a


class DLPack:
    """Only the DLPack protocol."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def saxpy(c, x, y, a=2.0):
    c.submit("saxpy_f32", a=a, x=x, y=y).result(timeout=10 * SLOW)


def pair(c):
    x = c.array(np.arange(N, dtype=np.float32))
    y = c.array(np.ones(N, dtype=np.float32))
    return x, y


def want(a=2.0):
    return np.float32(a) * np.arange(N, dtype=np.float32) + 1


@pytest.mark.parametrize("kind", ["view", "memoryview", "interface", "dlpack"])
def test_accepted_reads_and_writes(conn, kind):
    x, y = pair(conn)
    wrap = {"view": lambda a: a[:],
            "memoryview": memoryview,
            "interface": Interface,
            "dlpack": DLPack}[kind]
    saxpy(conn, wrap(x), wrap(y))
    assert np.array_equal(y, want())


def test_views_inside_a_buffer(conn):
    # A slice's offset is its address; a 2-D view of a matrix is a matrix.
    big = conn.array(np.arange(4 * N, dtype=np.float32))
    y = conn.zeros((N,), np.float32)
    saxpy(conn, memoryview(big)[N:2 * N], memoryview(y), a=1.0)
    assert np.array_equal(y, np.arange(N, 2 * N, dtype=np.float32))
    a = conn.array(np.eye(4, dtype=np.float32))
    b = conn.array(np.arange(16, dtype=np.float32).reshape(4, 4))
    out = conn.zeros((4, 4), np.float32)
    conn.submit("gemm_f32", alpha=1.0, beta=0.0, a=memoryview(a), b=Interface(b),
                c=memoryview(out)).result(timeout=10 * SLOW)
    assert np.array_equal(out, b)


@needs_torch
def test_torch_tensor_reads_and_writes(conn):
    x, y = pair(conn)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    saxpy(conn, tx, ty)
    assert torch.equal(ty, torch.from_numpy(want()))
    # A tensor view (a slice) is its own address and extent.
    ty[:] = 0
    saxpy(conn, tx[8:16], ty[:8], a=1.0)
    assert ty[:8].tolist() == list(range(8, 16)) and ty[8:].abs().sum() == 0
    # Matrices by shape, as for NumPy: gemm on tensors.
    a = torch.from_numpy(conn.array(np.arange(6, dtype=np.float32).reshape(2, 3)))
    b = torch.from_numpy(conn.array(np.arange(12, dtype=np.float32).reshape(3, 4)))
    c = torch.from_numpy(conn.zeros((2, 4), np.float32))
    conn.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=b, c=c).result(timeout=10 * SLOW)
    assert torch.equal(c, a @ b)
    # copy and fill take them too.
    conn.fill(c, 5.0).result(timeout=10 * SLOW)
    assert (c == 5).all()
    conn.copy(ty, tx).result(timeout=10 * SLOW)
    assert torch.equal(ty, tx)


def outside_cases(c):
    x, y = pair(c)
    plain = np.zeros(N, np.float32)
    # Straddling: starts inside y's buffer, ends past it.
    past = np.lib.stride_tricks.as_strided(y[N // 2:], shape=(N,), strides=(4,))
    cases = [("numpy", plain), ("memoryview", memoryview(plain)),
             ("interface", Interface(plain)), ("dlpack", DLPack(plain)),
             ("bytearray", bytearray(4 * N)),
             ("straddling view", past), ("straddling memoryview", memoryview(past))]
    if torch is not None:
        cases += [("tensor", torch.zeros(N)),
                  ("straddling tensor", torch.from_numpy(past))]
    return x, cases


def test_outside_refused_saying_how_to_allocate(conn):
    x, cases = outside_cases(conn)
    for what, arr in cases:
        with pytest.raises(ValueError) as e:
            conn.submit("saxpy_f32", a=1.0, x=x, y=arr)
        msg = str(e.value)
        assert "argument 'y'" in msg and "not in a shared buffer of this connection" in msg \
            and ALLOCATE in msg and "c.empty(" in msg, (what, msg)
        if what.startswith("straddling"):
            assert "past the buffer's end" in msg, (what, msg)
    # Exactly at the end is inside.
    y = conn.zeros((N,), np.float32)
    saxpy(conn, memoryview(x)[N // 2:], y[N // 2:], a=1.0)
    assert np.array_equal(y[N // 2:], np.arange(N // 2, N, dtype=np.float32))


def test_wrong_dtype_and_not_contiguous_name_the_argument(conn):
    x, y = pair(conn)
    d = conn.zeros((2 * N,), np.float32)
    with pytest.raises(TypeError, match=r"argument 'x' .* needs a float32 array, got float64"):
        conn.submit("saxpy_f32", a=1.0, x=memoryview(conn.zeros((N,), np.float64)), y=y)
    with pytest.raises(ValueError, match=r"argument 'y' .*C-contiguous"):
        conn.submit("saxpy_f32", a=1.0, x=x, y=memoryview(d)[::2])
    with pytest.raises(ValueError, match=r"argument 'y' .*read-only"):
        conn.submit("saxpy_f32", a=1.0, x=x, y=memoryview(y).toreadonly())
    if torch is not None:
        with pytest.raises(TypeError, match=r"argument 'x' .* needs a float32 array, got float64"):
            conn.submit("saxpy_f32", a=1.0, x=torch.from_numpy(conn.zeros((N,), np.float64)),
                        y=y)
        with pytest.raises(ValueError, match=r"argument 'y' .*C-contiguous"):
            conn.submit("saxpy_f32", a=1.0, x=x, y=torch.from_numpy(d)[::2])
        with pytest.raises(TypeError, match=r"argument 'x' .*torch.bfloat16 have no devq type"):
            conn.submit("saxpy_f32", a=1.0, x=torch.zeros(N, dtype=torch.bfloat16), y=y)


def test_dlpack_views_are_zero_copy(conn):
    a = conn.array(np.arange(N, dtype=np.float32))
    v = np.from_dlpack(a)
    assert np.shares_memory(v, a) and v.__array_interface__["data"][0] == \
        a.__array_interface__["data"][0]
    a[3] = 42
    assert v[3] == 42
    # NumPy gives read-only views of DLPack (DLPack cannot say read-only)
    # and refuses to export a read-only array: make a writable one to share.
    ro = a[:]
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="readonly"):
        np.from_dlpack(ro)
    if torch is not None:
        t = torch.from_dlpack(a)
        assert t.data_ptr() == a.__array_interface__["data"][0]
        t[5] = -1
        assert a[5] == -1
        back = np.from_dlpack(t)
        assert np.shares_memory(back, a)
        # and such a tensor is an argument like any other
        y = conn.zeros((N,), np.float32)
        saxpy(conn, t, torch.from_dlpack(y), a=1.0)
        assert np.array_equal(y, a)
