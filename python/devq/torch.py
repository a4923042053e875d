# SPDX-License-Identifier: Apache-2.0
"""devq.torch: PyTorch tensors in devq memory, and a model's matrix
products sent to devqd.

    import torch, devq, devq.torch

    with devq.connect() as c:
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 1024))
        devq.torch.place(model, c)               # its float32 weights now live in devq memory
        x = devq.torch.from_tensor(c, torch.randn(64, 1024))
        with torch.no_grad(), devq.torch.mode(c) as stats:
            y = model(x)                         # each linear: gemm_f32_nt (+ bias_act_f32)
        print(stats.ops, stats.fallbacks, stats.copies)   # 3, {}, 0

Tensors.  ``empty(c, shape)``, ``zeros(c, shape)`` and ``from_tensor(c, t)``
return ordinary ``torch.Tensor`` objects whose memory is a shared buffer of
the connection ``c`` (``torch.from_numpy`` of ``c.empty``'s array: zero
copy), usable as kernel arguments (``c.submit(..., x=t)``) and by torch.
``place(module, c)`` copies a module's float32 parameters and buffers, once,
into one shared buffer and points the module's tensors there
(``param.data``: the Parameter objects, their ``requires_grad`` and the
optimiser's references stay).

The mode.  ``with devq.torch.mode(c) as stats:`` is a
``torch.overrides.TorchFunctionMode``: inside it
``torch.nn.functional.linear``, ``torch.matmul``/``Tensor.matmul``/``@``,
``torch.mm``/``Tensor.mm`` and ``torch.addmm``/``Tensor.addmm`` on float32
operands of 2 dims (a left operand of more dims is taken as rows by
reshape) run as devq's ``gemm_f32``/``gemm_f32_nt`` (a transposed right
operand, as a linear layer's weight ``[out, in]``, is ``gemm_f32_nt`` without
a copy), a bias as ``bias_act_f32``; ``relu`` (``torch.relu``,
``F.relu``, ``Tensor.relu`` and their in-place forms) of a float32 tensor in
devq memory runs as ``bias_act_f32``.  Results are tensors in devq memory,
from a pool of shared buffers kept per connection (a new one costs a
memfd and a message to devqd): a result's buffer is reused once no tensor
over it is left and no op in flight uses it; at most 8 free ones of each
size are kept.
A float32 operand outside devq memory, or not contiguous, is copied into it
first (``stats.copies`` counts them: ``place`` the model and allocate the
input with ``from_tensor`` to have none).  Everything else runs in torch,
counted in ``stats.fallbacks`` (function name -> calls, as ``"gelu"`` or
``"Tensor.t"``; attribute reads such as ``t.shape`` are not counted;
``stats.reasons`` says why, last reason per name): other functions, other
dtypes, shapes that
are not a matrix product, and every call while autograd records (an operand
that requires grad with grad enabled: devq runs inference only, so use
``torch.no_grad()`` or ``torch.inference_mode()``).  ``stats.ops`` counts
the calls run by devq, ``stats.sent`` the same by name.  Each call waits for
its ops: the result is ready when torch gets it, as torch's own is.  Like
the connection, the mode belongs to the thread that made the connection.

Only public PyTorch APIs that are the same in 1.13 (Debian 12's
python3-torch) and 2.x are used.
"""

import collections
import contextlib
import dataclasses
import threading
import weakref

import numpy as np

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "devq.torch needs PyTorch: apt-get install python3-torch (Debian), or "
        "install devq[torch]; devq itself works without it (%s)" % e, name="torch") from e

import torch.nn.functional as F

import devq

__all__ = ["empty", "zeros", "from_tensor", "place", "mode", "Stats"]

_NP = {
    torch.uint8: np.uint8, torch.int8: np.int8, torch.int16: np.int16,
    torch.int32: np.int32, torch.int64: np.int64, torch.float16: np.float16,
    torch.float32: np.float32, torch.float64: np.float64, torch.bool: np.bool_,
}

# While set (on this thread), a devq mode lets torch calls through
# unseen: the helpers below use torch, and must not count as the user's
# fallbacks when called inside a `with mode(c)` block.
_local = threading.local()


@contextlib.contextmanager
def _quiet():
    was = getattr(_local, "quiet", False)
    _local.quiet = True
    try:
        yield
    finally:
        _local.quiet = was


def _np_dtype(dtype):
    try:
        return _NP[dtype]
    except KeyError:
        raise TypeError("devq.torch: %s has no devq type (%s)"
                        % (dtype, ", ".join(str(d) for d in _NP))) from None


def _shape(shape):
    if isinstance(shape, int):
        return (shape,)
    return tuple(shape)


def empty(c, shape, dtype=torch.float32):
    """A tensor of shape and dtype over a new shared buffer of c (contents
    unspecified)."""
    with _quiet():
        return torch.from_numpy(c.empty(_shape(shape), _np_dtype(dtype)))


def zeros(c, shape, dtype=torch.float32):
    """A tensor of shape and dtype over a new shared buffer of c, zeros."""
    with _quiet():
        return torch.from_numpy(c.zeros(_shape(shape), _np_dtype(dtype)))


def from_tensor(c, t):
    """A copy of t (any tensor on the CPU) in a new shared buffer of c, as a
    contiguous tensor of the same shape and dtype.  It does not record
    autograd history (it is detached)."""
    with _quiet():
        out = empty(c, tuple(t.shape), t.dtype)
        out.copy_(t.detach())
        return out


def _in(c, t):
    """True when t lies whole, contiguous, in a shared buffer of c."""
    try:
        c._resolve(t, "tensor")
    except (TypeError, ValueError):
        return False
    return True


def place(module, c, align=64):
    """Copies module's float32 parameters and buffers (on the CPU) into one
    new shared buffer of c, each once (a tensor shared by two layers stays
    shared), and points them there: afterwards the module's tensors view
    devq memory.  Parameters stay the same objects (their .data changes),
    requires_grad untouched.  Tensors already in c's memory, and tensors of
    other dtypes or devices, are left where they are.  Returns module."""
    with _quiet():
        todo, seen = [], set()
        for t in list(module.parameters()) + list(module.buffers()):
            if (id(t) in seen or t.dtype != torch.float32 or t.device.type != "cpu"
                    or _in(c, t)):
                continue
            seen.add(id(t))
            todo.append(t)
        if not todo:
            return module
        offsets, total = [], 0
        step = max(align // 4, 1)
        for t in todo:
            offsets.append(total)
            total += -(-t.numel() // step) * step  # each starts aligned
        whole = c.empty((total,), np.float32)
        for t, off in zip(todo, offsets):
            view = torch.from_numpy(whole[off:off + t.numel()]).view(t.shape)
            view.copy_(t.detach())
            t.data = view
        return module


# Results of the mode come from a pool of shared buffers per connection:
# a new shared buffer costs a memfd, two mappings and a message to devqd
# (about 0.6 ms, bench/RESULTS.md), more than the matrix product of a
# small layer.  A result's block returns to the pool when the last tensor
# (or array) over it dies; at most _POOL_KEEP free blocks of each size are
# kept while the connection lives, the others released as usual.
_POOL_KEEP = 8


class _Pool:
    __slots__ = ("free", "zero")

    def __init__(self):
        self.free = {}  # nbytes -> deque of free blocks (float32 arrays)
        self.zero = None  # zeros for relu's bias, grown as needed


_pools = weakref.WeakKeyDictionary()  # Connection -> _Pool


def _pool(c):
    p = _pools.get(c)
    if p is None:
        p = _pools[c] = _Pool()
    return p


def _pool_put(pool, nbytes, block):
    free = pool.free.setdefault(nbytes, collections.deque())
    if len(free) < _POOL_KEEP:
        free.append(block)


def _busy(c, block):
    """True when an op in flight on c uses block's buffer (an op submitted
    by hand on a result that was then dropped): not reused before it is
    done."""
    if not c._inflight:
        return False
    buf = devq._owner_buffer(block)
    return any(op._refs and buf in op._refs for op in c._inflight.values())


def _result(c, shape):
    """A float32 tensor of shape in devq memory, from c's pool."""
    n = 1
    for d in shape:
        n *= d
    nbytes = max(n * 4, 4)
    pool = _pool(c)
    free = pool.free.get(nbytes)
    block = None
    if free:
        b = free.popleft()
        if _busy(c, b):
            free.append(b)
        else:
            block = b
    if block is None:
        block = c.empty((nbytes // 4,), np.float32)
    arr = block[:n].reshape(shape)  # a new view: its death returns the block
    weakref.finalize(arr, _pool_put, pool, nbytes, block)
    return torch.from_numpy(arr)


def _zeros(c, n):
    """n float32 zeros in devq memory (relu's bias), kept per connection."""
    pool = _pool(c)
    if pool.zero is None or pool.zero.shape[0] < n:
        pool.zero = c.zeros((max(n, 4096),), np.float32)
    return pool.zero[:n]


@dataclasses.dataclass
class Stats:
    """What a devq.torch.mode block did: ops (calls run by devq), sent
    (the same by function name), fallbacks (function name -> calls run by
    torch instead), reasons (function name -> why, the last time), copies
    (tensors copied into devq memory first)."""

    ops: int = 0
    sent: dict = dataclasses.field(default_factory=dict)
    fallbacks: dict = dataclasses.field(default_factory=dict)
    reasons: dict = dataclasses.field(default_factory=dict)
    copies: int = 0


class _Fallback(Exception):
    """This call cannot go to devq (raised before anything was sent)."""


def _name(func):
    name = getattr(func, "__name__", None) or repr(func)
    qual = getattr(func, "__qualname__", "") or ""
    # Tensor methods: _TensorBase.x in 1.13, TensorBase.x in later 2.x.
    if qual.split(".")[0] in ("_TensorBase", "TensorBase", "Tensor"):
        return "Tensor." + name
    return name


def _arg(args, kwargs, i, name, default=None):
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


class _Mode(torch.overrides.TorchFunctionMode):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.stats = Stats()
        T = torch.Tensor
        self._handlers = {
            F.linear: _Mode._linear,
            torch.matmul: _Mode._matmul, T.matmul: _Mode._matmul, T.__matmul__: _Mode._matmul,
            torch.mm: _Mode._mm, T.mm: _Mode._mm,
            torch.addmm: _Mode._addmm, T.addmm: _Mode._addmm,
            torch.relu: _Mode._relu, F.relu: _Mode._relu, T.relu: _Mode._relu,
            torch.relu_: _Mode._relu_, F.relu_: _Mode._relu_, T.relu_: _Mode._relu_,
        }

    def __enter__(self):
        super().__enter__()
        return self.stats

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(_local, "quiet", False):
            return func(*args, **kwargs)
        h = self._handlers.get(func)
        name = _name(func)
        if h is not None:
            try:
                out = h(self, name, args, kwargs)
            except _Fallback as e:
                self.stats.reasons[name] = str(e)
            else:
                s = self.stats
                s.ops += 1
                s.sent[name] = s.sent.get(name, 0) + 1
                return out
        # Attribute reads (t.shape, t.dtype...) compute nothing: not counted.
        if name != "__get__":
            f = self.stats.fallbacks
            f[name] = f.get(name, 0) + 1
        return func(*args, **kwargs)

    # -- operands ---------------------------------------------------------

    def _check(self, *ts):
        for t in ts:
            if not isinstance(t, torch.Tensor):
                raise _Fallback("an operand is %s, not a tensor" % type(t).__name__)
            if t.dtype != torch.float32:
                raise _Fallback("an operand is %s, devq's gemm is float32" % t.dtype)
            if t.device.type != "cpu":
                raise _Fallback("an operand is on %s" % t.device)
            if t.numel() == 0:
                raise _Fallback("an operand is empty")
        if torch.is_grad_enabled() and any(t.requires_grad for t in ts):
            raise _Fallback("autograd is recording: devq runs inference only "
                            "(torch.no_grad() or torch.inference_mode())")

    def _dev(self, t):
        """t itself when it lies contiguous in devq memory, else a copy
        there (counted)."""
        if t.is_contiguous() and _in(self.c, t):
            return t
        self.stats.copies += 1
        out = empty(self.c, tuple(t.shape))
        out.copy_(t)
        return out

    def _right(self, b):
        """(matrix, transposed) for a right operand b[k, n]: a transposed
        view of a contiguous [n, k] tensor (a linear layer's weight.t())
        goes to gemm_f32_nt as it is."""
        if b.dim() == 2 and not b.is_contiguous() and b.t().is_contiguous():
            return self._dev(b.t()), True
        return self._dev(b), False

    def _gemm(self, a, b, nt, bias=None, alpha=1.0, beta=0.0, out=None):
        """out[..., n] = alpha * a[..., k] @ op(b) + beta * out (+ bias[n]),
        a's leading dims taken as rows; returns out."""
        k = a.shape[-1]
        n = b.shape[0] if nt else b.shape[1]
        if (b.shape[1] if nt else b.shape[0]) != k:
            raise _Fallback("shapes %s and %s do not multiply"
                            % (tuple(a.shape), tuple(b.t().shape if nt else b.shape)))
        a = self._dev(a)
        a2 = a.reshape(-1, k)
        if out is None:
            out = _result(self.c, tuple(a.shape[:-1]) + (n,))
        c = self.c
        with c.batch():
            last = c.submit("gemm_f32_nt" if nt else "gemm_f32", alpha=alpha, beta=beta,
                            a=a2, b=b, c=out.view(-1, n))
            if bias is not None:
                last = c.submit("bias_act_f32", act=0, bias=bias, x=out.view(-1, n))
        last.result()
        return out

    # -- handlers ---------------------------------------------------------

    def _linear(self, name, args, kwargs):
        x = _arg(args, kwargs, 0, "input")
        w = _arg(args, kwargs, 1, "weight")
        b = _arg(args, kwargs, 2, "bias")
        self._check(x, w, *([b] if b is not None else []))
        if w.dim() != 2 or x.dim() < 1:
            raise _Fallback("weight of %d dims, input of %d" % (w.dim(), x.dim()))
        if b is not None and tuple(b.shape) != (w.shape[0],):
            raise _Fallback("bias of shape %s" % (tuple(b.shape),))
        if x.shape[-1] != w.shape[1]:
            raise _Fallback("input %s, weight %s" % (tuple(x.shape), tuple(w.shape)))
        w = self._dev(w)
        if b is not None:
            b = self._dev(b)
        return self._gemm(x, w, True, bias=b)

    def _matmul(self, name, args, kwargs):
        a = _arg(args, kwargs, 0, "input")
        b = _arg(args, kwargs, 1, "other")
        if kwargs.get("out") is not None:
            raise _Fallback("out= given")
        self._check(a, b)
        if a.dim() < 2 or b.dim() != 2:
            raise _Fallback("operands of %d and %d dims (devq: a matrix, or rows by "
                            "reshape, times a matrix)" % (a.dim(), b.dim()))
        bm, nt = self._right(b)
        return self._gemm(a, bm, nt)

    def _mm(self, name, args, kwargs):
        a = _arg(args, kwargs, 0, "input")
        b = _arg(args, kwargs, 1, "mat2")
        if kwargs.get("out") is not None:
            raise _Fallback("out= given")
        self._check(a, b)
        if a.dim() != 2 or b.dim() != 2:
            raise _Fallback("operands of %d and %d dims" % (a.dim(), b.dim()))
        bm, nt = self._right(b)
        return self._gemm(a, bm, nt)

    def _addmm(self, name, args, kwargs):
        inp = _arg(args, kwargs, 0, "input")
        a = _arg(args, kwargs, 1, "mat1")
        b = _arg(args, kwargs, 2, "mat2")
        beta = kwargs.get("beta", 1)
        alpha = kwargs.get("alpha", 1)
        if kwargs.get("out") is not None:
            raise _Fallback("out= given")
        self._check(inp, a, b)
        if a.dim() != 2 or b.dim() != 2:
            raise _Fallback("operands of %d and %d dims" % (a.dim(), b.dim()))
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or \
                isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise _Fallback("alpha, beta not numbers")
        m = a.shape[0]
        n = b.shape[1]
        bm, nt = self._right(b)
        if tuple(inp.shape) in ((n,), (1, n)) and beta == 1:
            return self._gemm(a, bm, nt, bias=self._dev(inp.reshape(n)), alpha=float(alpha))
        if tuple(inp.shape) == (m, n):
            out = _result(self.c, (m, n))
            out.copy_(inp)
            return self._gemm(a, bm, nt, alpha=float(alpha), beta=float(beta), out=out)
        raise _Fallback("input of shape %s (devq: a bias [n] with beta 1, or [m, n])"
                        % (tuple(inp.shape),))

    def _relu_args(self, args, kwargs):
        x = _arg(args, kwargs, 0, "input")
        self._check(x)
        if not (x.is_contiguous() and _in(self.c, x)):
            raise _Fallback("the tensor is not in devq memory")
        cols = x.shape[-1] if x.dim() else 1
        return x, x.numel() // cols, cols

    def _relu_on(self, src, dst, rows, cols):
        c = self.c
        with c.batch():
            if dst is not src:
                c.copy(dst, src)
            last = c.submit("bias_act_f32", act=1, bias=_zeros(c, cols),
                            x=dst.view(rows, cols))
        last.result()
        return dst

    def _relu(self, name, args, kwargs):
        if kwargs.get("inplace") or _arg(args, {}, 1, "inplace"):
            return self._relu_(name, args[:1], {k: v for k, v in kwargs.items()
                                                if k != "inplace"})
        x, rows, cols = self._relu_args(args, kwargs)
        return self._relu_on(x, _result(self.c, tuple(x.shape)), rows, cols)

    def _relu_(self, name, args, kwargs):
        x, rows, cols = self._relu_args(args, kwargs)
        return self._relu_on(x, x, rows, cols)


def mode(c):
    """A context manager (a torch.overrides.TorchFunctionMode) that sends
    torch's matrix products and relu on float32 tensors to devq through the
    connection c; ``with devq.torch.mode(c) as stats`` gives its Stats.
    See help(devq.torch)."""
    if not isinstance(c, devq.Connection):
        raise TypeError("devq.torch.mode: expected a devq.Connection, got %s"
                        % type(c).__name__)
    return _Mode(c)
