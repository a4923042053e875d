# SPDX-License-Identifier: Apache-2.0
"""Matrices in signatures (shape := dim (',' dim)*) end to end: a devqd
serving repository executables from tests/repo_kernels.c, driven through
the binding and devctl.  transpose_f32 shows the row-major layout; sum16
the 16-parameter limit."""

import os
import shutil
import subprocess

import numpy as np
import pytest

import devq
from conftest import BUILD, SLOW, Daemon

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TRANSPOSE = "m:u64, n:u64, a:in f32[m,n], t:out f32[n,m]"
SUM16 = ", ".join("a%d:u64" % i for i in range(1, 16)) + ", out:out u64[1]"

pytestmark = pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler for the kernels")


@pytest.fixture(scope="module")
def mdaemon(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    os.chmod(repo, 0o755)
    so = repo / "kernels.so"
    subprocess.run(["cc", "-std=c11", "-O2", "-shared", "-fPIC", "-I", os.path.join(ROOT, "kernels"),
                    "-o", str(so), os.path.join(ROOT, "tests", "repo_kernels.c")], check=True)
    for name, sig in (("transpose_f32", TRANSPOSE), ("sum16", SUM16)):
        (repo / (name + ".exec")).write_text(
            "signature = %s\ncpu = kernels.so\ncpu-symbol = %s\n" % (sig, name))
    for f in repo.iterdir():
        os.chmod(f, 0o644)
    d = Daemon("--executables", str(repo))
    yield d
    assert d.stop() == 0, d.tail()


@pytest.fixture
def mconn(mdaemon):
    with devq.connect(mdaemon.sock) as c:
        yield c


def test_listed_as_written(mconn):
    ex = mconn.executables()
    assert ex["transpose_f32"] == TRANSPOSE
    assert ex["sum16"] == SUM16


def test_dims_inferred_from_shapes(mconn):
    a = mconn.array(np.arange(15, dtype=np.float32).reshape(3, 5))
    t = mconn.empty((5, 3), np.float32)
    mconn.submit("transpose_f32", a=a, t=t).result(timeout=10 * SLOW)
    assert np.array_equal(t, np.asarray(a).T)
    t[...] = -1
    mconn.submit("transpose_f32", m=3, n=5, a=a, t=t).result(timeout=10 * SLOW)
    assert np.array_equal(t, np.asarray(a).T)


def test_shapes_checked_not_just_sizes(mconn):
    a = mconn.zeros((3, 5), np.float32)
    with pytest.raises(ValueError, match=r"argument 't' \(t:out f32\[n,m\]\) has shape \(3, 5\), "
                                         r"the signature wants \(n, m\) = \(5, 3\)"):
        mconn.submit("transpose_f32", m=3, n=5, a=a, t=mconn.zeros((3, 5), np.float32))
    # Left to inference, the same arrays disagree on m and n.
    with pytest.raises(ValueError, match=r"cannot infer m: a.shape\[0\] is 3, t.shape\[1\] is 5"):
        mconn.submit("transpose_f32", a=a, t=mconn.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match=r"argument 'a' .* needs a 2-dimensional array, got shape \(15,\)"):
        mconn.submit("transpose_f32", m=3, n=5, a=mconn.zeros((15,), np.float32),
                     t=mconn.zeros((5, 3), np.float32))
    with pytest.raises(ValueError, match=r"cannot infer n: a.shape\[1\] is 5, t.shape\[0\] is 4; "
                                         r"the signature wants a\[m,n\], t\[n,m\]: "
                                         r"a is \(3, 5\), t is \(4, 3\)"):
        mconn.submit("transpose_f32", a=a, t=mconn.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"has shape \(3, 5\), the signature wants \(m, n\) = \(3, 4\)"):
        mconn.submit("transpose_f32", n=4, a=a, t=mconn.zeros((4, 3), np.float32))


def test_sixteen_parameters(mconn):
    out = mconn.zeros((1,), np.uint64)
    args = {"a%d" % i: i for i in range(1, 16)}
    mconn.submit("sum16", out=out, **args).result(timeout=10 * SLOW)
    assert int(out[0]) == sum(i * i for i in range(1, 16))


def devctl(mdaemon, *argv):
    return subprocess.run([os.path.join(BUILD, "devctl"), "--socket", mdaemon.sock, *argv],
                          capture_output=True, text=True, timeout=30 * SLOW)


def test_devctl_infers_a_dim(mdaemon, tmp_path):
    a = np.arange(15, dtype=np.float32).reshape(3, 5)
    (tmp_path / "a.bin").write_bytes(a.tobytes())
    # m is the last unknown dim of a once n is given: 15 / 5 = 3.
    r = devctl(mdaemon, "submit", "transpose_f32", "n=5", "a=@%s" % (tmp_path / "a.bin"),
               "--out", "t=%s" % (tmp_path / "t.bin"))
    assert r.returncode == 0, r.stderr
    t = np.frombuffer((tmp_path / "t.bin").read_bytes(), np.float32)
    assert np.array_equal(t, a.T.ravel())
    r = devctl(mdaemon, "submit", "transpose_f32", "n=4", "a=@%s" % (tmp_path / "a.bin"))
    assert r.returncode == 2
    assert "cannot infer 'm' from argument 'a': its 15 elements are not a multiple of 4" in r.stderr
    r = devctl(mdaemon, "list")
    assert "transpose_f32(%s)" % TRANSPOSE in r.stdout


def test_daemon_refuses_an_overflowing_shape(mdaemon):
    # m * n = 2^64 - 1 elements of u8 would fit; of f32 they overflow, and
    # the daemon names the argument (out_of_range) before touching a buffer.
    r = devctl(mdaemon, "submit", "transpose_f32", "m=4294967295", "n=4294967297",
               "a=size:64", "t=size:64")
    assert r.returncode != 0
    assert ("out_of_range: argument 'a': extent overflows 64 bits (4294967295 x 4294967297 f32)"
            in r.stderr + r.stdout), r.stderr + r.stdout
    # At a product that fits, the same buffers are refused for their size.
    r = devctl(mdaemon, "submit", "transpose_f32", "m=4", "n=4", "a=size:64", "t=size:64")
    assert r.returncode == 0, r.stderr
    r = devctl(mdaemon, "submit", "transpose_f32", "m=4", "n=5", "a=size:64", "t=size:64")
    assert r.returncode != 0 and "argument 'a'" in r.stderr + r.stdout, r.stderr + r.stdout
