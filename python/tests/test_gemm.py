# SPDX-License-Identifier: Apache-2.0
"""The built-in host executables gemm_f32 and gemm_f32_nt on the CPU backend
(OpenBLAS in build/host/libdevq-host-cpu.so, <devq/kernel.h>'s host ABI),
against NumPy in float64: C = alpha*A*op(B) + beta*C with rtol 1e-4 and
atol 1e-5*k, on odd shapes and with alpha, beta not 0 or 1; shapes and
buffers that do not agree are refused naming the argument; the dims' bounds
at the limit and one past it.  Also bias_act_f32, the MLP's other built-in,
and that OpenBLAS leaves no thread spinning after a gemm."""

import os
import subprocess
import time

import numpy as np
import pytest

import devq
from conftest import BUILD, SLOW, Daemon

SHAPES = [(1, 1, 1), (7, 13, 5), (257, 129, 65), (1024, 1024, 1024)]
ALPHA, BETA = np.float32(0.75), np.float32(-1.25)


@pytest.fixture(scope="module")
def gdaemon():
    d = Daemon()
    yield d
    assert d.stop() == 0, d.tail()


@pytest.fixture
def gconn(gdaemon):
    with devq.connect(gdaemon.sock) as c:
        yield c


def ref(a, b, c, nt):
    b64 = b.astype(np.float64)
    return ALPHA * (a.astype(np.float64) @ (b64.T if nt else b64)) + BETA * c.astype(np.float64)


def test_listed(gconn):
    ex = gconn.executables()
    assert ex["gemm_f32"] == ("m:u64, n:u64, k:u64, alpha:f32, beta:f32, "
                              "a:in f32[m,k], b:in f32[k,n], c:inout f32[m,n]")
    assert ex["gemm_f32_nt"] == ("m:u64, n:u64, k:u64, alpha:f32, beta:f32, "
                                 "a:in f32[m,k], b:in f32[n,k], c:inout f32[m,n]")


@pytest.mark.parametrize("nt", [False, True], ids=["nn", "nt"])
@pytest.mark.parametrize("m,n,k", SHAPES, ids=["%dx%dx%d" % s for s in SHAPES])
def test_agrees_with_numpy(gconn, m, n, k, nt):
    rng = np.random.default_rng(m * 1000003 + n * 1009 + k + nt)
    a = gconn.array(rng.standard_normal((m, k), dtype=np.float32))
    b = gconn.array(rng.standard_normal((n, k) if nt else (k, n), dtype=np.float32))
    c0 = rng.standard_normal((m, n), dtype=np.float32)
    c = gconn.array(c0)
    want = ref(np.asarray(a), np.asarray(b), c0, nt)
    gconn.submit("gemm_f32_nt" if nt else "gemm_f32", alpha=ALPHA, beta=BETA,
                 a=a, b=b, c=c).result(timeout=60 * SLOW)
    np.testing.assert_allclose(np.asarray(c), want, rtol=1e-4, atol=1e-5 * k)


def test_k_zero_scales_c(gconn):
    # k = 0: A*B is empty, C = beta*C (BLAS's leading dimensions stay >= 1).
    c = gconn.array(np.full((3, 4), 2.0, np.float32))
    a = gconn.empty((3, 0), np.float32)
    b = gconn.empty((0, 4), np.float32)
    gconn.submit("gemm_f32", m=3, n=4, k=0, alpha=ALPHA, beta=BETA, a=a, b=b,
                 c=c).result(timeout=10 * SLOW)
    assert np.array_equal(np.asarray(c), np.full((3, 4), 2.0 * BETA, np.float32))


def test_wrong_shape_names_argument(gconn):
    a = gconn.array(np.ones((4, 3), np.float32))
    b = gconn.array(np.ones((2, 5), np.float32))  # should be [k=3, n]
    c = gconn.array(np.zeros((4, 5), np.float32))
    # The binding checks shapes before sending (naming both sides)...
    with pytest.raises(ValueError) as e:
        gconn.submit("gemm_f32", a=a, b=b, c=c)
    assert "b.shape[0] is 2" in str(e.value) and "a.shape[1] is 3" in str(e.value), str(e.value)
    # ...and every operand's shape against the signature's.
    assert ("the signature wants a[m,k], b[k,n], c[m,n]: a is (4, 3), b is (2, 5), "
            "c is (4, 5)") in str(e.value), str(e.value)
    assert "fit" not in str(e.value), str(e.value)


def test_transposed_b_suggests_nt(gconn):
    # A linear layer's weights are [out, in]: b given as [n, k] fits
    # gemm_f32_nt, which the refusal names.
    a = gconn.array(np.ones((4, 3), np.float32))
    w = gconn.array(np.ones((5, 3), np.float32))
    c = gconn.array(np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match=r"these shapes fit gemm_f32_nt$"):
        gconn.submit("gemm_f32", a=a, b=w, c=c)
    gconn.submit("gemm_f32_nt", alpha=1.0, beta=0.0, a=a, b=w, c=c).result(timeout=10 * SLOW)
    assert np.array_equal(np.asarray(c), np.full((4, 5), 3, np.float32))


def test_bias_act_unknown_activation_refused(gconn):
    # act is 0 (none) or 1 (ReLU): another value was applied as the
    # identity; now devqd refuses it, naming the argument.
    bias = gconn.array(np.zeros(4, np.float32))
    x = gconn.array(np.ones((2, 4), np.float32))
    with pytest.raises(devq.Error) as e:
        gconn.submit("bias_act_f32", act=5, bias=bias, x=x).result(timeout=10 * SLOW)
    assert e.value.code == "invalid_argument", e.value
    assert "argument 'act': 5 is not an activation" in str(e.value), e.value
    assert np.array_equal(np.asarray(x), np.ones((2, 4), np.float32))


def devctl(sock, *args):
    """The C client (devctl) against the same daemon: it sends buffers of
    any size, which the binding's own shape checks would stop first."""
    r = subprocess.run([os.path.join(BUILD, "devctl"), "--socket", sock, "submit", *args],
                       capture_output=True, text=True, timeout=30 * SLOW)
    return r.returncode, r.stdout + r.stderr


def test_buffer_too_small_names_argument(gdaemon):
    dims = ["gemm_f32", "m=4", "n=5", "k=3", "alpha=1", "beta=0", "a=size:48", "b=size:60"]
    rc, out = devctl(gdaemon.sock, *dims, "c=size:76")  # one element short
    assert rc != 0 and "out_of_range: argument 'c'" in out, out
    rc, out = devctl(gdaemon.sock, *dims, "c=size:80")  # exactly m*n
    assert rc == 0 and ": ok" in out, out


def test_extent_overflow_names_argument(gdaemon):
    # a's extent m*k*4 bytes: 2^31 * (2^31 - 1) * 4 fits in 64 bits (then
    # the 16-byte buffer is too small), 2^31 * 2^31 * 4 does not.
    bufs = ["n=1", "alpha=1", "beta=0", "a=size:16", "b=size:16", "c=size:16"]
    rc, out = devctl(gdaemon.sock, "gemm_f32", "m=2147483648", "k=2147483647", *bufs)
    assert rc != 0 and "argument 'a': bytes [0, 18446744065119617024) lie outside" in out, out
    rc, out = devctl(gdaemon.sock, "gemm_f32", "m=2147483648", "k=2147483648", *bufs)
    assert rc != 0 and "argument 'a': extent overflows 64 bits" in out, out


@pytest.mark.parametrize("dim", ["m", "n", "k"])
def test_blas_dim_limit(gconn, dim):
    # OpenBLAS takes int dims: 2^31-1 runs (the other two 0, so every
    # buffer is empty), 2^31 is refused by the host executable, naming it.
    def run(v):
        d = {"m": 0, "n": 0, "k": 0}
        d[dim] = v
        a = gconn.empty((d["m"], d["k"]), np.float32)
        b = gconn.empty((d["k"], d["n"]), np.float32)
        c = gconn.empty((d["m"], d["n"]), np.float32)
        return gconn.submit("gemm_f32", alpha=1.0, beta=1.0, a=a, b=b, c=c, **d).result(
            timeout=10 * SLOW)
    limit = (1 << 31) - 1
    run(limit)
    with pytest.raises(devq.Error) as e:
        run(limit + 1)
    msg = str(e.value)
    assert ("gemm_f32: %s = %d: more than this BLAS takes (%d)" % (dim, limit + 1, limit)) in msg, msg


def test_bias_act(gconn):
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal((5, 9), dtype=np.float32)
    bias = gconn.array(rng.standard_normal(9, dtype=np.float32))
    for act, f in ((0, lambda v: v), (1, lambda v: np.maximum(v, np.float32(0)))):
        x = gconn.array(x0)
        gconn.submit("bias_act_f32", act=act, bias=bias, x=x).result(timeout=10 * SLOW)
        assert np.array_equal(np.asarray(x), f(x0 + np.asarray(bias)))
    # ReLU's edges, as the branch-free CPU code must keep them: a negative
    # sum is +0.0, -0.0 and NaN pass unchanged; act 0 adds only.  A bias
    # of -0.0 leaves every value as it is (-0.0 + -0.0 is -0.0).
    edge = np.array([[-1.0, -0.0, 0.0, np.nan, 2.5, -np.inf, np.inf]], np.float32)
    zero = gconn.array(np.full(7, -0.0, np.float32))
    for act in (0, 1):
        x = gconn.array(edge)
        gconn.submit("bias_act_f32", act=act, bias=zero, x=x).result(timeout=10 * SLOW)
        got = np.asarray(x)[0]
        want = edge[0] if act == 0 else np.array([0.0, -0.0, 0.0, np.nan, 2.5, 0.0, np.inf],
                                                 np.float32)
        assert np.array_equal(got, want, equal_nan=True), got
        assert list(np.signbit(got)) == list(np.signbit(want)), got


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_no_spinning_after_gemm(gdaemon, gconn):
    # OpenBLAS's own workers spin ~0.1 s after a call by default; devq's
    # host library keeps them out, so an idle devqd stays idle.
    rng = np.random.default_rng(1)
    a = gconn.array(rng.standard_normal((512, 512), dtype=np.float32))
    c = gconn.zeros((512, 512), np.float32)
    gconn.submit("gemm_f32", alpha=1.0, beta=0.0, a=a, b=a, c=c).result(timeout=30 * SLOW)
    # At once: a spinning pool would burn ~0.1 s per idle core from here.
    t0 = cpu_seconds(gdaemon.proc.pid)
    time.sleep(1.0)
    used = cpu_seconds(gdaemon.proc.pid) - t0
    assert used < 0.05 * SLOW, "devqd used %.2f s of CPU in 1 s while idle" % used
