# SPDX-License-Identifier: Apache-2.0
"""devq.torch: tensors over devq buffers (zero copy), place() of a
module's parameters, and the mode that sends linear, matmul, mm, addmm and
relu to devqd: results equal torch's own, counted (ops, fallbacks,
copies), inference only.  Without PyTorch these skip, saying so, except the
one that shows `import devq.torch` then raises ImportError naming
python3-torch."""

import os
import subprocess
import sys

import numpy as np
import pytest

import devq
from conftest import BUILD, SLOW

try:
    import torch
    import torch.nn.functional as F
    import devq.torch as dt
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(
    torch is None, reason="SKIP: no PyTorch: apt-get install python3-torch (make deps-torch)")

RTOL, ATOL = 1e-4, 1e-5


def test_import_without_torch_names_the_package():
    code = ("import sys\nsys.modules['torch'] = None  # as if not installed\n"
            "import devq\ntry:\n    import devq.torch\nexcept ImportError as e:\n"
            "    print(e)\n    sys.exit(3)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60 * SLOW)
    assert r.returncode == 3 and "python3-torch" in r.stdout, r.stdout + r.stderr


def inside(c, t):
    """t lies whole in a shared buffer of c."""
    try:
        c._resolve(t, "t")
    except ValueError:
        return False
    return True


@needs_torch
def test_tensors_over_devq_buffers(conn):
    c = conn
    e = dt.empty(c, (3, 4))
    z = dt.zeros(c, 5, torch.int32)
    src = torch.arange(12, dtype=torch.float64).reshape(3, 4).t()  # not contiguous
    f = dt.from_tensor(c, src)
    assert e.shape == (3, 4) and e.dtype == torch.float32
    assert z.tolist() == [0] * 5 and z.dtype == torch.int32
    assert torch.equal(f, src) and f.is_contiguous() and f.dtype == torch.float64
    assert all(inside(c, t) for t in (e, z, f))
    # zero copy: what devq writes, the tensor shows
    x = dt.from_tensor(c, torch.arange(8, dtype=torch.float32))
    y = dt.zeros(c, 8)
    c.submit("saxpy_f32", a=3.0, x=x, y=y).result(timeout=10 * SLOW)
    assert y.tolist() == [3.0 * i for i in range(8)]
    with pytest.raises(TypeError, match="no devq type"):
        dt.empty(c, 4, torch.complex64)


def mlp(sizes=(32, 64, 64, 16), seed=0):
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


@needs_torch
def test_place(conn):
    c = conn
    m = mlp()
    m.register_buffer("steps", torch.zeros(2, dtype=torch.int64))  # not float32: stays
    m.register_buffer("scale", torch.ones(3))
    m[2].weight.requires_grad_(False)
    params = list(m.parameters())
    values = [p.detach().clone() for p in params]
    before = c.status().session.buffers
    assert dt.place(m, c) is m
    assert c.status().session.buffers == before + 1   # one buffer for all
    assert list(m.parameters()) == params              # the same Parameter objects
    assert [p.requires_grad for p in params] == [True, True, False, True, True, True]
    assert all(torch.equal(p, v) for p, v in zip(params, values))
    assert all(inside(c, p) for p in params) and inside(c, m.scale)
    assert not inside(c, m.steps) and m.steps.dtype == torch.int64
    assert all(p.data_ptr() % 64 == 0 for p in params)
    dt.place(m, c)                                     # placed already: nothing new
    assert c.status().session.buffers == before + 1
    # Tied weights stay tied.
    tied = torch.nn.Linear(8, 8)
    pair = torch.nn.Sequential(tied, torch.nn.ReLU(), tied)
    dt.place(pair, c)
    assert pair[0].weight.data_ptr() == pair[2].weight.data_ptr() and inside(c, pair[0].weight)


@needs_torch
def test_mlp_through_the_mode(conn):
    c = conn
    m = mlp()
    x0 = torch.randn(8, 32)
    with torch.no_grad():
        want = m(x0)
    dt.place(m, c)
    x = dt.from_tensor(c, x0)
    with torch.no_grad(), dt.mode(c) as stats:
        got = m(x)
    assert torch.allclose(got, want, rtol=RTOL, atol=ATOL), (got - want).abs().max()
    assert stats.sent == {"linear": 3, "relu": 2} and stats.ops == 5, stats
    assert stats.fallbacks == {} and stats.copies == 0, stats
    assert inside(c, got)
    # An input outside devq memory is copied in, and counted.
    with torch.no_grad(), dt.mode(c) as stats:
        got = m(x0)
    assert torch.allclose(got, want, rtol=RTOL, atol=ATOL)
    assert stats.copies == 1 and stats.sent["linear"] == 3, stats
    # A batch of sequences: rows by reshape.
    seq = torch.randn(2, 5, 32)
    with torch.no_grad():
        want3 = m(seq)
    with torch.inference_mode(), dt.mode(c) as stats:
        got3 = m(dt.from_tensor(c, seq))
    assert got3.shape == (2, 5, 16) and torch.allclose(got3, want3, rtol=RTOL, atol=ATOL)
    assert stats.fallbacks == {} and stats.copies == 0, stats


@needs_torch
def test_matrix_products(conn):
    c = conn
    g = torch.Generator().manual_seed(1)
    a = dt.from_tensor(c, torch.randn(7, 13, generator=g))
    b = dt.from_tensor(c, torch.randn(13, 5, generator=g))
    w = dt.from_tensor(c, torch.randn(5, 13, generator=g))     # [n, k]: b = w.t()
    bias = dt.from_tensor(c, torch.randn(5, generator=g))
    full = dt.from_tensor(c, torch.randn(7, 5, generator=g))
    cases = [
        ("matmul", lambda: torch.matmul(a, b)),
        ("Tensor.matmul", lambda: a @ b),
        ("mm", lambda: torch.mm(a, w.t())),                  # transposed: gemm_f32_nt
        ("Tensor.mm", lambda: a.mm(b)),
        ("addmm", lambda: torch.addmm(bias, a, b)),
        ("addmm", lambda: torch.addmm(full, a, w.t(), beta=0.5, alpha=2.0)),
        ("Tensor.addmm", lambda: full.addmm(a, b, alpha=-1.0)),
    ]
    for name, fn in cases:
        want = fn()
        with torch.no_grad(), dt.mode(c) as stats:
            got = fn()
        assert stats.sent == {name: 1} and stats.copies == 0, (name, stats)
        assert torch.allclose(got, want, rtol=RTOL, atol=ATOL * 13), (name, got, want)
        assert inside(c, got), name


@needs_torch
def test_relu(conn):
    c = conn
    x0 = torch.randn(6, 10)
    x0[0, 0] = float("nan")
    for fn, name in ((torch.relu, "relu"), (F.relu, "relu"), (lambda t: t.relu(), "Tensor.relu")):
        x = dt.from_tensor(c, x0)
        with torch.no_grad(), dt.mode(c) as stats:
            y = fn(x)
        assert stats.sent == {name: 1}, stats
        assert torch.allclose(y, torch.relu(x0), equal_nan=True) and inside(c, y)
        assert torch.equal(x.isnan(), x0.isnan()) and torch.equal(x[1:], x0[1:])  # untouched
    for fn in (lambda t: F.relu(t, inplace=True), torch.relu_, lambda t: t.relu_()):
        x = dt.from_tensor(c, x0)
        with torch.no_grad(), dt.mode(c) as stats:
            y = fn(x)
        assert stats.ops == 1 and y.data_ptr() == x.data_ptr(), stats
        assert torch.allclose(x, torch.relu(x0), equal_nan=True)
    # relu of a tensor outside devq memory runs in torch
    with torch.no_grad(), dt.mode(c) as stats:
        y = torch.relu(x0)
    assert stats.ops == 0 and stats.fallbacks == {"relu": 1}, stats


@needs_torch
def test_fallbacks_are_counted(conn):
    c = conn
    m = mlp()
    dt.place(m, c)
    x = dt.from_tensor(c, torch.randn(4, 32))
    want = m(x).detach()
    # Autograd recording: everything runs in torch (inference only).
    with dt.mode(c) as stats:
        y = m(x)
    assert stats.ops == 0 and stats.fallbacks == {"linear": 3, "relu": 2}, stats
    assert "autograd" in stats.reasons["linear"] and y.requires_grad
    assert torch.allclose(y.detach(), want)
    # Other functions, dtypes and shapes run in torch too.
    d = torch.randn(3, 4, dtype=torch.float64)
    v = dt.from_tensor(c, torch.randn(32))
    with torch.no_grad(), dt.mode(c) as stats:
        F.gelu(x)
        torch.mm(d, d.t())
        torch.matmul(x, v)                                   # a vector on the right
        x.shape                                              # attribute reads: not counted
    assert stats.ops == 0, stats
    assert stats.fallbacks == {"gelu": 1, "mm": 1, "Tensor.t": 1, "matmul": 1}, stats
    assert "float64" in stats.reasons["mm"] and "1 dims" in stats.reasons["matmul"], stats


@needs_torch
def test_results_not_reused_while_an_op_uses_them(conn):
    c = conn
    a = dt.from_tensor(c, torch.ones(16, 16))
    with torch.no_grad(), dt.mode(c):
        y = a @ a
    ptr = y.data_ptr()
    busy = c.submit("spin_buf", ns=300_000_000, buf=y)       # writes y's bytes for 0.3 s
    del y
    with torch.no_grad(), dt.mode(c):
        z = a @ a
    assert z.data_ptr() != ptr and (z == 16).all()
    busy.result(timeout=10 * SLOW)
    del z
    with torch.no_grad(), dt.mode(c):                         # now it is free again
        w = a @ a
    assert (w == 16).all()


@needs_torch
def test_mode_needs_a_connection():
    with pytest.raises(TypeError, match="devq.Connection"):
        dt.mode(None)


@needs_torch
def test_readme_example_runs(daemon):
    # README's "PyTorch: devq.torch" example, as it is written there.
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")) as f:
        text = f.read()
    part = text[text.index("### PyTorch: `devq.torch`"):]
    code = part[part.index("```python\n") + 10:part.index("```\n", part.index("```python"))]
    assert "devq.torch.mode(c)" in code
    exec(compile(code, "README.md", "exec"), {})
