# SPDX-License-Identifier: Apache-2.0
"""devq: share one GPU between processes, from Python.

A binding of libdevq (the C client library of the devq daemon, devqd):
NumPy arrays that live in shared buffers the daemon maps too, kernels
submitted by name with their arguments checked against the daemon's typed
signatures, and completions as futures that block, poll or ``await``.

    import numpy as np, devq

    with devq.connect() as c:              # socket: argument, $DEVQ_SOCKET, or the default
        print(c.executables())             # {"saxpy_f32": "n:u64, a:f32, x:in f32[n], y:inout f32[n]", ...}
        x = c.array(np.arange(1 << 20, dtype=np.float32))  # a shared buffer holding a copy
        y = c.empty((1 << 20,), np.float32)                # a shared buffer, uninitialised
        y[:] = 1.0
        op = c.submit("saxpy_f32", a=2.0, x=x, y=y)        # n inferred; returns at once
        r = op.result(timeout=5)           # blocks; raises devq.Error on failure
        print(r.status, r.point, r.timing.device_ns)
        s = c.submit("reduce_sum_f32", x=y, out=c.empty((1,), np.float32),
                     queue=1, wait=[op])   # queues open on first use

Arrays.  ``c.array``, ``c.empty`` and ``c.zeros`` return ordinary
``numpy.ndarray`` objects whose memory is the shared buffer (a memfd mapped
by this process and by devqd): no copy on submit, none on completion.  Any
array over that memory is a buffer argument: a NumPy view or slice, a
memoryview, an object with ``__array_interface__``, a DLPack producer, a
PyTorch tensor (``torch.from_numpy(a)``, by its ``data_ptr()``; see
devq.torch).  It must be C-contiguous and lie whole inside one shared
buffer of the connection (its offset is taken from its address); an array
elsewhere is refused saying how to allocate in devq memory.
``np.from_dlpack(a)`` and ``torch.from_dlpack(a)`` of such an array are
zero-copy views (NumPy refuses to export a read-only array).  The
buffer is released, as the daemon's contract says, when the array, every
view of it and every op that uses it are done: ops hold their buffers until
their completion has been seen.  Reading or writing an array while an op
that writes (or reads) it is in flight races, as it would on a GPU: wait
for the op first.  Arrays stay valid after the connection is closed (they
are then plain memory).  ``c.device_empty`` makes a device buffer (not
mapped here) that kernels, ``c.copy`` and ``c.fill`` use like an array.

Ops.  ``c.submit``, ``c.copy`` and ``c.fill`` return an ``Op`` at once (no
reply is awaited: points are counted on both sides).  ``op.result(timeout)``
blocks, ``op.done()`` polls, ``await op`` waits in asyncio (the connection
watches ``c.fileno()`` with ``loop.add_reader`` while something awaits).
``wait=[op, (queue, point), ...]`` orders an op after others; ops on one
queue run in order; conflicting buffer accesses are ordered by the daemon.
``with c.batch(): ...`` sends every op submitted inside as one message.
``deadline=SECONDS`` on ``submit``, ``copy`` and ``fill`` gives the op a
deadline counted from the daemon's receipt: an op the device has not
started by then never runs (its buffers keep their bytes) and fails
"deadline_exceeded", failing its queue like any failure (ops after it and
ops waiting on it: "dependency_failed"); a running op is not stopped.

Errors.  A failure the daemon reports is a ``devq.Error`` whose ``.code`` is
the protocol's code name ("invalid_argument", "not_found", "out_of_range",
"permission_denied", "resource_exhausted", "failed_precondition",
"dependency_failed", "device_error", "device_lost", "protocol_error",
"cancelled", "deadline_exceeded") and ``.message`` the daemon's text;
``op.result()`` raises it.
Two codes are the binding's own: "unavailable" (the daemon cannot be reached
or the connection broke) and "internal" (a local failure without a daemon
code; ``.errno`` says which).  Bad arguments (an unknown executable, a wrong
dtype, an array too small for n, a missing or unknown parameter) raise
``TypeError``/``ValueError`` naming the signature before anything is sent.
An op stopped while it ran leaves its output arrays partly written: a host
executable that runs in slices (``gemm_f32``, ``gemm_f32_nt`` on the CPU
backend) stops at the end of a slice, "cancelled" when its connection
closes or its tenant is evicted, or failing with the daemon's
"deadline_exceeded" once its device time passes devqd's max-op-ms.

Threads.  As with libdevq, a connection belongs to the thread that made it:
use one connection per thread.  Calls from another thread raise
``devq.ThreadError`` (a ``RuntimeError``) instead of corrupting the handle.
Blocking calls release the GIL.  A connection cannot cross fork(): in a
child every call raises ``devq.ForkError``; connect again there.

Ctrl-C, restarts.  Waits return to Python every 200 ms, so Ctrl-C raises
KeyboardInterrupt promptly and loses nothing: waiting again returns the
op's result.  When devqd stops or restarts, calls fail "connection to devqd
lost (stopped or restarted)"; ``c.reconnect()`` carries the connection over,
arrays included.  Each array holds one file descriptor; importing devq
raises the soft RLIMIT_NOFILE to the hard limit.

PyTorch.  ``devq.torch`` (``import devq.torch``; needs python3-torch):
tensors over shared buffers, ``place(module, c)`` to put a model's weights
in devq memory, and ``with devq.torch.mode(c):`` to send its linear
layers, matrix products and ReLUs to devqd.  See help(devq.torch).

Why ctypes.  The binding is pure Python over ``libdevq.so.0`` through
``ctypes``: no compiler, no CPython ABI to build against (one package serves
every Python 3 of the distribution), and the C library stays the only
implementation of the protocol.  The price is the overhead of each foreign
call; bench/py_bench.py measures the per-op cost against the C client
(bench/RESULTS.md, "Python binding overhead").  The library is
found through $DEVQ_LIBRARY, then beside a build tree (build/libdevq.so.0),
then as ``libdevq.so.0`` on the system's library path; a missing one, or
one older than this package's MAJOR.MINOR, is an ImportError that names
the Debian package libdevq0.  Installing: the Debian package python3-devq,
or ``pip install --no-index --no-build-isolation ./python`` (the tree's
python/pyproject.toml) or the wheel of ``make python-wheel`` into a venv.
"""

import asyncio
import collections
import contextlib
import ctypes
import dataclasses
import errno as _errno
import math
import mmap
import numbers
import operator
import os
import struct
import sys
import threading
import time
import weakref

import numpy as np

from . import _lib as L
from . import _sig
try:
    from ._version import __version__  # written by `make python`
except ImportError:  # pragma: no cover - a source tree, not built
    __version__ = "0+unknown"

__all__ = [
    "connect",
    "Connection",
    "Op",
    "Result",
    "Timing",
    "DeviceArray",
    "DaemonInfo",
    "Status",
    "SessionStatus",
    "Error",
    "ThreadError",
    "ForkError",
    "CODES",
    "__version__",
]

_dll, LIBRARY = L.load(__version__)

CODES = L.CODE_NAMES
"""The protocol's code names, indexed by code value."""

DEFAULT_SOCKET = "/run/devqd/devqd.sock"


# ---- errors --------------------------------------------------------------


class Error(Exception):
    """A failure with a devq code.

    code: the protocol's code name (see CODES), or "unavailable" (daemon
    unreachable, connection broken) or "internal" (local failure).
    message: the daemon's (or libdevq's) explanation.
    queue, point: the op that failed, for errors raised by Op.result().
    request: the request an asynchronous error refers to (Connection.errors()).
    errno: the negative errno libdevq returned, when it returned one.
    """

    def __init__(self, code, message, *, queue=None, point=None, request=None,
                 errno=None, buffer=None):
        self.code = code
        self.message = message
        self.queue = queue
        self.point = point
        self.request = request
        self.errno = errno
        self.buffer = buffer
        where = " (queue %d, point %d)" % (queue, point) if point is not None else ""
        super().__init__("%s: %s%s" % (code, message, where))


class ThreadError(RuntimeError):
    """A connection (or an op or array of it) was used from a thread other
    than the one that made the connection.  libdevq handles belong to one
    thread: make one connection per thread."""


class ForkError(RuntimeError):
    """A connection (or an op or array of it) was used in a child of
    fork(): the child would share the parent's socket and buffer ids, and
    break the parent's session.  Connect again in the child."""


# Forks since import, counted in each child (os.register_at_fork): a
# connection made before a fork sees another count in the child.  A load
# per call, where os.getpid() would be a syscall.
_forks = 0


def _count_fork():
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_count_fork)


def _raise_fd_limit():
    """Raises this process's soft RLIMIT_NOFILE to its hard limit: every
    devq array holds a file descriptor, and Debian's default soft limit
    (1024) stops a script at about a thousand arrays although the hard
    limit allows far more.  Without effect where not permitted."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard and soft != resource.RLIM_INFINITY:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


_raise_fd_limit()


def _fd_limit():
    try:
        import resource
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, ValueError, OSError):
        return -1


_LOST = "connection to devqd lost (stopped or restarted)"

_ERRNO_CODES = {
    _errno.ECONNREFUSED: "unavailable",
    _errno.ECONNRESET: "unavailable",
    _errno.EPIPE: "unavailable",
    _errno.ENOTCONN: "unavailable",
    _errno.ENOENT: "not_found",
    _errno.EACCES: "permission_denied",
    _errno.EPERM: "permission_denied",
    _errno.EINVAL: "invalid_argument",
    _errno.ERANGE: "out_of_range",
    _errno.ENOSPC: "resource_exhausted",
    _errno.ENOMEM: "resource_exhausted",
    _errno.EPROTO: "protocol_error",
    _errno.EPROTONOSUPPORT: "failed_precondition",
}


def _deadline_us(deadline):
    """deadline= in seconds as the wire's microseconds (0: none), rounded
    up so that a deadline is never earlier than asked."""
    if deadline is None:
        return 0
    if isinstance(deadline, bool) or not isinstance(deadline, numbers.Real):
        raise TypeError("deadline: seconds as a number, not %r" % (deadline,))
    if not 0 < deadline < float("inf"):
        raise ValueError("deadline: %r is not a positive number of seconds (None: no "
                         "deadline)" % (deadline,))
    return min(math.ceil(deadline * 1e6), (1 << 64) - 1)


def _lib_error(rc, message, connecting=False):
    """An Error for a negative errno and libdevq's message; the code is the
    daemon's when the message carries one ("out_of_range: ...")."""
    message = message or os.strerror(-rc)
    head, sep, rest = message.partition(": ")
    if sep and head in CODES:
        return Error(head, rest, errno=rc)
    if rc == -_errno.ETIMEDOUT:
        return TimeoutError(message)
    code = _ERRNO_CODES.get(-rc, "internal")
    if connecting and code == "not_found":
        code = "unavailable"  # no socket at that path
    return Error(code, message, errno=rc)


def _op_error(code, msg, queue, point):
    """The Error of a failed completion.  A queue that failed fails every
    later op on it until reset: the daemon says so, and this says how."""
    name = CODES[code] if 0 <= code < len(CODES) else "unknown"
    if name == "dependency_failed" and msg.startswith("queue %d failed at" % queue):
        msg += " (call c.reset_queue(%d), then submit again)" % queue
    return Error(name, msg, queue=queue, point=point)


# A blocking wait returns to Python at least this often (ms), so that
# Ctrl-C is seen while an op runs.
_WAIT_SLICE_MS = 200


# ---- results ---------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Timing:
    """Raw CLOCK_MONOTONIC stamps of one op (ns, in causal order), and its
    phases as properties: submit_ns, queued_ns, device_ns, sync_ns and
    total_ns (see devq.h, struct devq_timing and devq_phases)."""

    client_submit: int
    received: int
    handoff: int
    device_start: int
    device_end: int
    observed: int
    client_received: int
    enqueue_ns: int

    @property
    def submit_ns(self):
        """Client submit to handed off to the device queue."""
        return self.handoff - self.client_submit

    @property
    def queued_ns(self):
        """Handed off to device start (dependencies, the device's queue)."""
        return self.device_start - self.handoff

    @property
    def device_ns(self):
        """Device start to device end."""
        return self.device_end - self.device_start

    @property
    def sync_ns(self):
        """Device end to the completion received by this client."""
        return self.client_received - self.device_end

    @property
    def total_ns(self):
        """Client submit to client received."""
        return self.client_received - self.client_submit


@dataclasses.dataclass(slots=True)
class Result:
    """What a successful op reports: status "ok", its point (queue, k) and
    its timing."""

    status: str
    point: tuple
    timing: Timing
    message: str = ""


@dataclasses.dataclass
class DaemonInfo:
    """What the daemon said at connect (devq_get_info)."""

    protocol: int
    daemon_version: str
    backend: str
    device: str
    streams: int
    max_frame: int
    max_fds: int
    max_op_ns: int
    session: int


@dataclasses.dataclass
class SessionStatus:
    """One session in the daemon's status (a user sees only their own)."""

    id: int
    pid: int
    uid: int
    name: str
    queues: int
    buffers: int
    ops_in_flight: int
    bytes_mapped: int
    ops_completed: int
    ops_failed: int
    queue_depths: dict  # queue id -> ops submitted but not completed


@dataclasses.dataclass
class Status:
    """The daemon's status (devctl status): device, totals, sessions."""

    backend: str
    device: str
    streams: int
    uptime_ns: int
    ops_in_flight: int
    bytes_mapped: int
    sessions_total: int
    ops_completed: int
    ops_failed: int
    buffers: int
    device_busy_ns: int
    op_errors: dict  # code name -> failed ops since start
    sessions: list
    session: SessionStatus  # this connection's, None if not listed
    # uid -> (device losses, refused until: seconds since the epoch), for
    # the uids refused after repeated device losses: every one for root
    # and the admin group, at most one's own uid for anyone else.
    refused: dict = dataclasses.field(default_factory=dict)
    # Tenants (devqd(8) FAIRNESS: a Unix user): every one for root and the
    # admin group, one's own for anyone else.
    tenants: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class TenantStatus:
    """A tenant's weight, queued work, device time and waits (devctl status)."""

    name: str  # "uid:1000"
    uid: int
    weight: int
    sessions: int
    ops_waiting: int  # waiting in the daemon for room on their stream
    queued_ns: int  # their expected device time
    ops_inside: int  # handed to the device, not completed
    ops_done: int
    device_ns: int
    wait_ns: int  # device start - daemon receipt, summed over `waits` ops
    wait_max_ns: int
    waits: int
    deadline_exceeded: int = 0  # ops not started by their client's deadline


# ---- buffers -------------------------------------------------------------


class _State:
    """What a connection's buffers need from it, without keeping the
    connection alive: the list of buffers that died, which the owner thread
    releases at its next call (finalizers may run on any thread)."""

    __slots__ = ("pending", "closed", "__weakref__")

    def __init__(self):
        self.pending = collections.deque()
        self.closed = False


def _buffer_died(state, ptr):
    if not state.closed:
        state.pending.append(ptr)


class _Buffer:
    """One libdevq buffer.  Alive while an array (through its _Mapping), a
    DeviceArray or an op in flight holds it; its death queues the release."""

    __slots__ = ("ptr", "id", "nbytes", "start", "state", "__weakref__")

    def __init__(self, state, ptr, nbytes, start):
        self.ptr = ptr
        self.id = ptr.contents.id
        self.nbytes = nbytes
        self.start = start  # address of the Python mapping (0: device buffer)
        self.state = state
        weakref.finalize(self, _buffer_died, state, ptr)


class _Mapping:
    """This process's mapping of a shared buffer's memfd: the memory every
    array of the buffer views (through __array_interface__, so every array's
    base chain ends here).  It holds the buffer, so the buffer lives as long
    as any array does; it outlives the connection (plain memory then).

    Mapped with mmap(2) through ctypes rather than Python's mmap module,
    which keeps a duplicate of the fd for as long as the mapping lives:
    libdevq already keeps one per buffer (for devq_reconnect), and two per
    array halved how many arrays fit under RLIMIT_NOFILE."""

    __slots__ = ("__array_interface__", "devq_buffer", "address", "size", "__weakref__")

    def __init__(self, fd, size):
        addr = _libc.mmap(None, size, _PROT_RW, _MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            e = ctypes.get_errno()
            raise OSError(e, "mmap: %s" % os.strerror(e))
        self.address = addr
        self.size = size
        self.devq_buffer = None
        self.__array_interface__ = {"data": (addr, False), "shape": (size,),
                                    "typestr": "|u1", "version": 3}
        weakref.finalize(self, _libc.munmap, addr, size)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
_MAP_SHARED = mmap.MAP_SHARED
_MAP_FAILED = ctypes.c_void_p(-1).value


def _shape(shape):
    if isinstance(shape, (tuple, list)):
        return tuple(operator.index(s) for s in shape)
    return (operator.index(shape),)


def _owner_buffer(a):
    b = a.base
    while True:
        t = type(b)
        if t is _Mapping:
            return b.devq_buffer
        if isinstance(b, np.ndarray):
            b = b.base
        elif t is memoryview:
            b = b.obj
        else:
            return None


_TORCH_DTYPES = None


def _torch_dtypes(torch):
    """torch dtype -> NumPy dtype, for the types a signature can name."""
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        _TORCH_DTYPES = {
            torch.uint8: np.dtype(np.uint8), torch.int8: np.dtype(np.int8),
            torch.int16: np.dtype(np.int16), torch.int32: np.dtype(np.int32),
            torch.int64: np.dtype(np.int64), torch.float16: np.dtype(np.float16),
            torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
            torch.bool: np.dtype(np.bool_),
        }
    return _TORCH_DTYPES


def _array_view(value, what):
    """(address, nbytes, dtype, writable, shape, C-contiguous, the _Buffer
    its NumPy base chain names or None) of anything that describes memory
    in this process: a NumPy array or view, a PyTorch tensor (by its
    data_ptr(), never converted), an object with __array_interface__, a
    DLPack producer, or an object with the buffer protocol (memoryview,
    mmap...).  Nothing is copied: the address is where the data is."""
    if isinstance(value, np.ndarray):
        a = value
    else:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            if value.device.type != "cpu":
                raise ValueError("%s: a tensor on %s is not in a shared buffer of this "
                                 "connection (devq memory is host memory)" % (what, value.device))
            dtype = _torch_dtypes(torch).get(value.dtype)
            if dtype is None:
                raise TypeError("%s: tensors of %s have no devq type" % (what, value.dtype))
            # Tensors have no read-only flag: they are written as torch would.
            return (value.data_ptr(), value.numel() * value.element_size(), dtype, True,
                    tuple(value.shape), value.is_contiguous(), None)
        if hasattr(value, "__array_interface__"):
            a = np.asarray(value)  # a view: the interface gives the address
        elif hasattr(value, "__dlpack__"):
            try:
                a = np.from_dlpack(value)
            except (BufferError, RuntimeError, TypeError, ValueError) as e:
                raise ValueError("%s: a DLPack array NumPy cannot view (%s); devq memory is "
                                 "host memory" % (what, e)) from None
            # DLPack cannot say read-only, so NumPy marks its views so; the
            # producer's memory is writable as torch.from_dlpack takes it.
            return (a.__array_interface__["data"][0], a.nbytes, a.dtype, True, a.shape,
                    a.flags.c_contiguous, _owner_buffer(a))
        else:
            try:
                m = memoryview(value)
            except TypeError:
                raise TypeError("%s: expected an array from c.array()/c.empty() (or a view, "
                                "tensor or memoryview of one) or a DeviceArray, got %s"
                                % (what, type(value).__name__)) from None
            a = np.asarray(m)
    return (a.__array_interface__["data"][0], a.nbytes, a.dtype, a.flags.writeable, a.shape,
            a.flags.c_contiguous, _owner_buffer(a))


class DeviceArray:
    """A device buffer (device memory, not mapped in this process) with a
    shape and dtype.  Use it as a kernel argument, or with Connection.copy
    and Connection.fill; on the CPU backend it is daemon-private memory."""

    __slots__ = ("shape", "dtype", "nbytes", "_buf", "__weakref__")

    def __init__(self, buf, shape, dtype):
        self._buf = buf
        self.shape = shape
        self.dtype = dtype
        self.nbytes = buf.nbytes

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __len__(self):
        return self.shape[0] if self.shape else 1

    def __repr__(self):
        return "DeviceArray(shape=%r, dtype=%s, buffer %d)" % (
            self.shape, self.dtype, self._buf.id)


# ---- ops -----------------------------------------------------------------


class Op:
    """A submitted op: a future of its completion.

    queue, point: the point (queue, k) it completes; executable: its name
    ("copy" and "fill" for those).  result(timeout) blocks and returns a
    Result or raises devq.Error; done() polls without blocking;
    exception(timeout) returns the Error instead of raising it;
    add_done_callback(fn) calls fn(op) when it completes (on the owner
    thread, from whichever call saw the completion); ``await op`` waits in
    asyncio."""

    __slots__ = ("_conn", "queue", "point", "executable", "_done", "_code", "_msg",
                 "_stamps", "_error", "_refs", "_cbs", "_afuts", "_sent", "__weakref__")

    def __init__(self, conn, queue, point, executable, refs):
        self._conn = conn
        self.queue = queue
        self.point = point
        self.executable = executable
        self._done = False
        self._code = None
        self._msg = ""
        self._stamps = None
        self._error = None
        self._refs = refs  # buffers the op uses: held until completion
        self._cbs = None
        self._afuts = None
        self._sent = True

    def __repr__(self):
        state = "pending"
        if self._done:
            state = "ok" if self._error is None else self._error.code
        return "<devq.Op %s (%d, %d) %s>" % (self.executable, self.queue, self.point, state)

    def _complete(self, code, msg, stamps):
        self._code = code
        self._stamps = stamps
        if code:
            self._msg = msg
            self._error = _op_error(code, msg, self.queue, self.point)
        self._done = True  # last: an interrupted _complete is redone whole
        self._refs = None
        if self._afuts:
            for f in self._afuts:
                if not f.done():
                    f.set_result(None)
            self._afuts = None
        if self._cbs:
            cbs, self._cbs = self._cbs, None
            for fn in cbs:
                fn(self)

    def _fail(self, error):
        self._done = True
        self._error = error
        self._refs = None
        if self._afuts:
            for f in self._afuts:
                if not f.done():
                    f.set_result(None)
            self._afuts = None
        if self._cbs:
            cbs, self._cbs = self._cbs, None
            for fn in cbs:
                fn(self)

    def done(self):
        """True once the completion arrived (reads what has arrived, without
        blocking)."""
        if not self._done and self._sent:
            self._conn.poll()
        return self._done

    def cancelled(self):
        """Always False: a submitted op cannot be withdrawn."""
        return False

    def result(self, timeout=None):
        """Waits at most timeout seconds (None: no limit) for the completion.
        Returns a Result; raises devq.Error when the op failed and
        TimeoutError when it did not complete in time."""
        if not self._done:
            self._conn._wait_op(self, timeout)
        if self._error is not None:
            raise self._error
        return Result("ok", (self.queue, self.point), Timing(*self._stamps), "")

    def exception(self, timeout=None):
        """Like result(), but returns the op's Error (None on success)."""
        if not self._done:
            self._conn._wait_op(self, timeout)
        return self._error

    def add_done_callback(self, fn):
        """Calls fn(op) once the op completed (at once if it has)."""
        if self._done:
            fn(self)
        else:
            if self._cbs is None:
                self._cbs = []
            self._cbs.append(fn)

    def __await__(self):
        if not self._done:
            yield from self._conn._await_op(self).__await__()
        return self.result()


# ---- the connection --------------------------------------------------------

_SCALARS = {
    # type: (libdevq arg type, union member, kind, lo, hi)
    "u64": (L.ARG_U64, "u64", "int", 0, (1 << 64) - 1),
    "u32": (L.ARG_U32, "u32", "int", 0, (1 << 32) - 1),
    "i64": (L.ARG_I64, "i64", "int", -(1 << 63), (1 << 63) - 1),
    "i32": (L.ARG_I32, "i32", "int", -(1 << 31), (1 << 31) - 1),
    "f32": (L.ARG_F32, "f32", "float", None, None),
    "f64": (L.ARG_F64, "f64", "float", None, None),
}


def _shapes_fit(ex, shapes):
    """Whether the arrays' shapes (name -> shape) are exactly ex's matrix
    arguments, each dimension naming one size throughout."""
    mats = {p.name: p for p in ex.params if p.is_buffer and len(p.dims) > 1}
    if set(mats) != set(shapes):
        return False
    sizes = {}
    for name, shape in shapes.items():
        dims = mats[name].dims
        if len(dims) != len(shape):
            return False
        for d, n in zip(dims, shape):
            if isinstance(d, int):
                if d != n:
                    return False
            elif sizes.setdefault(d, n) != n:
                return False
    return True


class _Exec:
    """An executable of the daemon: its signature parsed, and a template of
    its argument array (names and types set once)."""

    __slots__ = ("name", "signature", "params", "ptr", "args", "args_type",
                 "names", "bufs", "scalars", "where")

    def __init__(self, ptr, name, signature):
        self.ptr = ptr
        self.name = name
        self.signature = signature
        self.where = "%s(%s)" % (name, signature)
        try:
            self.params = _sig.parse(signature)
        except ValueError as e:
            self.params = None  # submitting it raises, naming the problem
            self.where = "%s(%s): %s" % (name, signature, e)
            return
        n = len(self.params)
        self.args_type = L.Arg * max(n, 1)
        self.args = self.args_type()
        for i, p in enumerate(self.params):
            self.args[i].name = p.name.encode()
            if p.is_buffer:
                self.args[i].type = L.ARG_BUFFER
            elif p.type in _SCALARS:
                self.args[i].type = _SCALARS[p.type][0]
        self.names = frozenset(p.name for p in self.params)
        # (index, param, its value union in args, ...): the union objects
        # share args' memory, so binding writes straight into it.
        self.bufs = [(i, p, self.args[i].v) for i, p in enumerate(self.params)
                     if p.is_buffer]
        self.scalars = []
        for i, p in enumerate(self.params):
            if not p.is_buffer:
                _, member, kind, lo, hi = _SCALARS.get(p.type, (None, None, None, None, None))
                self.scalars.append((i, p, self.args[i].v, member, kind, lo, hi))


_COMPLETION = L.Completion
_CMPL_STRUCT = struct.Struct(
    "=I%dxQi%dx8Q" % (
        L.Completion.point.offset - 4,
        L.Completion.t.offset - L.Completion.code.offset - 4,
    )
)
assert _CMPL_STRUCT.size == ctypes.sizeof(L.Completion)


def connect(socket=None, name=None):
    """Connects to devqd: the socket path given, else $DEVQ_SOCKET, else
    /run/devqd/devqd.sock.  name (default: the program's name) is what
    `devctl status` shows.  Returns a Connection (a context manager)."""
    return Connection(socket, name)


class Connection:
    """A session with devqd (one libdevq handle).  See help(devq).

    Use it as a context manager, or call close().  Belongs to the thread
    that made it."""

    def __init__(self, socket=None, name=None):
        self._owner = threading.get_ident()
        self._forks = _forks
        self._state = _State()
        h = ctypes.c_void_p()
        if name is None:
            arg0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
            name = os.path.basename(arg0) if not arg0.startswith("-") else ""
            name = name or "python"
        path = os.fsencode(socket) if socket is not None else None
        r = _dll.devq_connect(path, name.encode()[:63], ctypes.byref(h))
        if r < 0:
            msg = _dll.devq_last_error(h).decode(errors="replace") if h.value else ""
            if h.value:
                _dll.devq_disconnect(h)
            where = socket or os.environ.get("DEVQ_SOCKET") or DEFAULT_SOCKET
            err = _lib_error(r, msg or "%s: %s" % (where, os.strerror(-r)), connecting=True)
            raise err
        self._h = h
        self._finalizer = weakref.finalize(self, Connection._finalize, self._state, h)
        inf = _dll.devq_get_info(h).contents
        self.info = DaemonInfo(
            inf.version, inf.daemon_version.decode(), inf.backend.decode(),
            inf.device.decode(errors="replace"), inf.streams, inf.max_frame,
            inf.max_fds, inf.max_op_ns, inf.session)
        self._execs = None
        self._queues = {}  # queue id -> ops submitted (libdevq counts the same)
        self._inflight = {}  # (queue, point) -> Op
        self._regions = {}  # buffer id -> (start, end, weakref to _Buffer)
        self._releasing = []  # buffer pointers whose release was asked
        self._nbuf = 0  # buffers made and not yet freed
        self._cmpl = _COMPLETION()
        self._cmpl_ref = ctypes.byref(self._cmpl)
        self._op1 = L.Op()
        self._op1_ref = ctypes.byref(self._op1)
        self._batch = None  # in a batch: [(what its ops' pointers need, Op)]
        self._bops = (L.Op * 64)()  # the batch's ops, as devq_submit takes them
        self._bn = 0
        # The batch's options (devq_submit_ex), made when an op in a batch
        # first has a deadline; _bext_on: the open batch has one.
        self._bext = None
        self._bext_on = False
        self._broken = None
        self._reader_loop = None
        self._reader_users = 0

    @staticmethod
    def _finalize(state, h):
        state.closed = True
        _dll.devq_disconnect(h)

    def __repr__(self):
        if self._h is None:
            return "<devq.Connection closed>"
        return "<devq.Connection session %d, %s backend, %d ops in flight>" % (
            self.info.session, self.info.backend, len(self._inflight))

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        # On the way out of an exception, do not wait for work in flight.
        self.close(wait=et is None)
        return False

    # -- plumbing ---------------------------------------------------------

    def _check(self):
        if self._forks != _forks:
            raise ForkError("a devq connection cannot cross fork(); call devq.connect() "
                            "in the child")
        if threading.get_ident() != self._owner:
            raise ThreadError(
                "devq: this connection belongs to thread %d, not the calling thread %d "
                "(libdevq handles are single-threaded: make one connection per thread)"
                % (self._owner, threading.get_ident()))
        if self._h is None:
            raise Error("unavailable", "the connection is closed")
        if self._broken is not None:
            raise Error(self._broken.code, self._broken.message, errno=self._broken.errno)
        if self._state.pending:
            self._release_dead()

    def _last_error(self):
        return _dll.devq_last_error(self._h).decode(errors="replace")

    def _raise(self, r):
        """Raises the error of libdevq's return value r; a broken connection
        fails every op in flight with it and every later call."""
        err = _lib_error(r, self._last_error())
        if isinstance(err, Error) and err.code == "unavailable":
            # libdevq says where it noticed ("submit ring doorbell: Broken
            # pipe"); what happened and what to do come first.
            err = Error("unavailable", "%s: %s; c.reconnect() carries this connection "
                        "over to a new devqd" % (_LOST, err.message), errno=err.errno)
            self._break(err)
        raise err

    def _break(self, err):
        self._broken = err
        ops = list(self._inflight.values())
        self._inflight.clear()
        for op in ops:
            op._fail(Error(err.code, err.message, queue=op.queue, point=op.point,
                           errno=err.errno))
        self._reader_stop()

    def _release_dead(self):
        pending = self._state.pending
        while pending:
            ptr = pending.popleft()
            self._regions.pop(ptr.contents.id, None)
            r = _dll.devq_buffer_release(self._h, ptr)
            if r < 0:
                self._raise(r)
            self._releasing.append(ptr)

    def _reap_released(self):
        keep = []
        for ptr in self._releasing:
            if ptr.contents.released:
                _dll.devq_buffer_wait_released(self._h, ptr, 0)  # frees it
                self._nbuf -= 1
            else:
                keep.append(ptr)
        self._releasing = keep

    def _dispatch(self):
        """Completes the op of the record in self._cmpl.  Safe to repeat:
        a KeyboardInterrupt may land anywhere in here (or between libdevq
        handing the record over and this call), so the record stays marked
        taken (point != 0: points count from 1) until its op is done and
        out of _inflight, and the next wait or poll dispatches it again
        (_drain and _wait_until look first) rather than losing it."""
        q, p, code, *stamps = _CMPL_STRUCT.unpack_from(self._cmpl)
        op = self._inflight.get((q, p))
        if op is not None:
            if not op._done:
                msg = self._cmpl.message.decode(errors="replace") if code else ""
                op._complete(code, msg, stamps)
            self._inflight.pop((q, p), None)
        self._cmpl.point = 0

    def _drain(self):
        if self._cmpl.point:  # taken from libdevq, then interrupted
            self._dispatch()
        n = 0
        nc = _dll.devq_next_completion
        h, ref = self._h, self._cmpl_ref
        while True:
            r = nc(h, ref, 0)
            if r < 0:
                break
            self._dispatch()
            n += 1
        if r != -_errno.ETIMEDOUT:
            self._raise(r)
        if self._releasing:
            self._reap_released()
        return n

    def _wait_op(self, op, timeout):
        if not op._sent:
            raise RuntimeError("devq: this op is sent when its batch's with-block ends")
        if op._conn is not self:
            raise ValueError("devq: op of another connection")
        if self._h is None and not op._done:
            raise Error("cancelled", "the connection was closed before the op completed",
                        queue=op.queue, point=op.point)
        self._check()
        self._wait_until(lambda: op._done, timeout,
                         lambda: "op (%d, %d)" % (op.queue, op.point))

    def _wait_until(self, done, timeout, what):
        """Takes completions (blocking) until done() is true; TimeoutError
        after timeout seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        nc = _dll.devq_next_completion
        h, ref = self._h, self._cmpl_ref
        if self._cmpl.point:
            self._dispatch()
        while not done():
            # In slices: Python runs a signal's handler (Ctrl-C's
            # KeyboardInterrupt) only once the foreign call returns, and
            # libdevq's poll() retries EINTR.
            if deadline is None:
                ms = _WAIT_SLICE_MS
            else:
                left = deadline - time.monotonic()
                ms = min(_WAIT_SLICE_MS, max(0, int(left * 1000 + 0.999)))
            r = nc(h, ref, ms)
            if r == 0:
                self._dispatch()
            elif r == -_errno.ETIMEDOUT:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError("devq: %s did not complete within %gs"
                                       % (what(), timeout))
            else:
                try:
                    self._raise(r)
                except Error:
                    if done():  # failed with the connection: result() says so
                        break
                    raise
        if self._releasing:
            self._reap_released()

    # -- asyncio ------------------------------------------------------------

    async def _await_op(self, op):
        self._check()
        if not op._sent:
            raise RuntimeError("devq: this op is sent when its batch's with-block ends")
        loop = asyncio.get_running_loop()
        if self._reader_loop is not None and self._reader_loop is not loop:
            raise RuntimeError("devq: this connection is already awaited in another event loop")
        fut = loop.create_future()
        if op._afuts is None:
            op._afuts = []
        op._afuts.append(fut)
        if self._reader_loop is None:
            loop.add_reader(_dll.devq_fd(self._h), self._on_readable)
            self._reader_loop = loop
        self._reader_users += 1
        try:
            self.poll()  # it may have arrived already
            if not op._done:
                await fut
        finally:
            self._reader_users -= 1
            if self._reader_users == 0:
                self._reader_stop()

    def _reader_stop(self):
        loop, self._reader_loop = self._reader_loop, None
        if loop is not None and self._h is not None and not loop.is_closed():
            loop.remove_reader(_dll.devq_fd(self._h))

    def _on_readable(self):
        try:
            self.poll()
        except Error:
            pass  # the ops in flight carry it (_break)

    # -- public ----------------------------------------------------------

    def fileno(self):
        """The connection's socket: readable when completions (or other
        messages) arrive; then call poll().  For event loops:
        loop.add_reader(c.fileno(), c.poll).  (`await op` does this itself.)"""
        self._check()
        return _dll.devq_fd(self._h)

    def poll(self):
        """Reads what has arrived without blocking, completes the ops whose
        completions came, and returns how many did."""
        self._check()
        return self._drain()

    def synchronize(self, timeout=None):
        """Waits until every op submitted on this connection has completed
        (failed ones included); TimeoutError after timeout seconds."""
        self._check()
        inflight = self._inflight
        self._wait_until(lambda: not inflight, timeout,
                         lambda: "%d ops" % len(inflight))

    def close(self, wait=True):
        """Waits for the ops in flight (unless wait is False), then
        disconnects.  Ops still in flight then fail with "cancelled"; the
        daemon releases this session's buffers after their last op; arrays
        stay readable.  Closing twice is harmless."""
        if self._h is None:
            return
        if threading.get_ident() != self._owner or self._forks != _forks:
            self._check()
        if wait and self._broken is None:
            try:
                self.synchronize()
            except (Error, TimeoutError):
                pass
        self._reader_stop()
        ops = list(self._inflight.values())
        self._inflight.clear()
        for op in ops:
            op._fail(Error("cancelled", "the connection was closed before the op completed",
                           queue=op.queue, point=op.point))
        self._finalizer()  # devq_disconnect, once
        self._h = None
        self._execs = None
        self._regions.clear()
        self._releasing = []

    @property
    def closed(self):
        return self._h is None

    def reconnect(self, timeout=10):
        """Carries this connection over to a new devqd on the same socket
        (after "connection to devqd lost", or a device_lost), as
        devq_reconnect() does: waits up to timeout seconds for the daemon,
        re-imports every shared buffer under its id, so every array stays
        usable, and reopens every queue (their points restart at 1).  Ops
        that had not completed are gone (they failed with the connection);
        DeviceArrays lived in the lost daemon and cannot be used again."""
        if self._h is None:
            raise Error("unavailable", "the connection is closed")
        broken, self._broken = self._broken, None
        try:
            self._check()
        finally:
            self._broken = broken
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        r = _dll.devq_reconnect(self._h, ms)
        if r < 0:
            err = _lib_error(r, self._last_error())
            if isinstance(err, Error):
                self._break(err)
            raise err
        self._reader_stop()
        ops = list(self._inflight.values())
        self._inflight.clear()
        for op in ops:  # sent to the old daemon and never completed
            op._fail(Error("unavailable", "%s before the op completed" % _LOST,
                           queue=op.queue, point=op.point))
        self._cmpl.point = 0
        self._broken = None
        self._execs = None  # ids may differ in the new daemon
        self._queues = dict.fromkeys(self._queues, 0)
        if self._releasing:
            self._reap_released()  # libdevq marked them released
        inf = _dll.devq_get_info(self._h).contents
        self.info = DaemonInfo(
            inf.version, inf.daemon_version.decode(), inf.backend.decode(),
            inf.device.decode(errors="replace"), inf.streams, inf.max_frame,
            inf.max_fds, inf.max_op_ns, inf.session)

    # executables ---------------------------------------------------------

    def _load_execs(self):
        lst = ctypes.POINTER(L.Exec)()
        n = ctypes.c_size_t()
        r = _dll.devq_exec_list(self._h, ctypes.byref(lst), ctypes.byref(n))
        if r < 0:
            self._raise(r)
        execs = {}
        size = ctypes.sizeof(L.Exec)
        base = ctypes.cast(lst, ctypes.c_void_p).value
        for i in range(n.value):
            ptr = ctypes.cast(base + i * size, ctypes.POINTER(L.Exec))
            e = ptr.contents
            name = e.name.decode()
            execs[name] = _Exec(ptr, name, e.signature.decode())
        self._execs = execs
        return execs

    def executables(self):
        """{name: signature} of every executable the daemon offers."""
        self._check()
        execs = self._execs or self._load_execs()
        return {name: e.signature for name, e in execs.items()}

    # buffers -------------------------------------------------------------

    def _shapes_story(self, ex, shapes):
        """What a shape mismatch needs said: every matrix argument's shape
        against the signature's ("a[m,k] @ b[k,n] -> c[m,n]": a is (3, 5),
        ...), and another executable whose signature the same shapes fit
        (gemm_f32_nt for a b given as [n,k]).  "" without matrices."""
        if not shapes:
            return ""
        mats = [p for p in ex.params if p.is_buffer and len(p.dims) > 1]
        want = ", ".join("%s[%s]" % (p.name, ",".join(str(d) for d in p.dims)) for p in mats)
        got = ", ".join("%s is %r" % (p.name, tuple(shapes[p.name]))
                        for p in mats if p.name in shapes)
        text = "; the signature wants %s: %s" % (want, got)
        fits = [e.name for e in (self._execs or {}).values()
                if e is not ex and e.params and _shapes_fit(e, shapes)]
        if fits:
            text += "; these shapes fit %s" % " or ".join(sorted(fits))
        return text

    def _fds_exhausted(self):
        return Error("resource_exhausted",
                     "out of file descriptors (RLIMIT_NOFILE is %d): each devq shared array "
                     "holds 1 (libdevq's copy of its memfd, for c.reconnect()), and this "
                     "connection has %d; drop arrays no longer needed, or raise the limit "
                     "(ulimit -n)" % (_fd_limit(), self._nbuf), errno=-_errno.EMFILE)

    def _quota_hint(self):
        """What a buffer-quota refusal leaves out: how many buffers ops
        whose completion was not read still hold."""
        held = set()
        for op in self._inflight.values():
            if op._refs:
                held.update(id(b) for b in op._refs)
        if not held:
            return ""
        return ("; %d buffers are held by %d ops whose completion was not read: "
                "call c.poll() or c.synchronize() to let them go"
                % (len(held), len(self._inflight)))

    def _shared(self, nbytes):
        size = max(int(nbytes), 1)  # a memfd cannot be mapped empty
        # Completions already here free the buffers of their ops (and,
        # for a loop that submits without waiting, keep it under the
        # daemon's buffer quota).
        self._drain()
        try:
            fd = os.memfd_create("devq-python", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError as e:
            if e.errno in (_errno.EMFILE, _errno.ENFILE):
                raise self._fds_exhausted() from None
            raise
        try:
            os.ftruncate(fd, size)
            import fcntl
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
            m = _Mapping(fd, size)
            out = ctypes.POINTER(L.Buffer)()
            r = _dll.devq_buffer_import(self._h, fd, size, 0, ctypes.byref(out))
        finally:
            os.close(fd)
        if r < 0:
            if r in (-_errno.EMFILE, -_errno.ENFILE):
                raise self._fds_exhausted()
            try:
                self._raise(r)
            except Error as e:
                if e.code == "resource_exhausted":
                    hint = self._quota_hint()
                    if hint:
                        raise Error(e.code, e.message + hint, errno=e.errno) from None
                raise
        start = m.address
        buf = _Buffer(self._state, out, size, start)
        self._nbuf += 1
        m.devq_buffer = buf
        self._regions[buf.id] = (start, start + size, weakref.ref(buf))
        return m

    def empty(self, shape, dtype=np.float64):
        """A new shared buffer as an ndarray of shape and dtype (contents
        unspecified)."""
        self._check()
        dtype = np.dtype(dtype)
        shape = _shape(shape)
        count = 1
        for s in shape:
            if s < 0:
                raise ValueError("devq: negative dimension in shape %r" % (shape,))
            count *= s
        m = self._shared(count * dtype.itemsize)
        return np.ndarray(shape, dtype, buffer=np.asarray(m))

    def zeros(self, shape, dtype=np.float64):
        """A new shared buffer as an ndarray, zero-filled."""
        a = self.empty(shape, dtype)
        a[...] = 0
        return a

    def array(self, obj, dtype=None):
        """A new shared buffer holding a copy of obj (anything np.asarray
        takes), as a C-contiguous ndarray of the same shape and dtype."""
        self._check()
        src = np.asarray(obj, dtype=dtype)
        a = self.empty(src.shape, src.dtype)
        a[...] = src
        return a

    def device_empty(self, shape, dtype=np.float64):
        """A new device buffer (device memory; not mapped here) of shape and
        dtype, as a DeviceArray."""
        self._check()
        dtype = np.dtype(dtype)
        shape = _shape(shape)
        count = 1
        for s in shape:
            if s < 0:
                raise ValueError("devq: negative dimension in shape %r" % (shape,))
            count *= s
        size = max(count * dtype.itemsize, 1)
        out = ctypes.POINTER(L.Buffer)()
        r = _dll.devq_buffer_create(self._h, size, L.BUFFER_DEVICE, ctypes.byref(out))
        if r < 0:
            self._raise(r)
        self._nbuf += 1
        return DeviceArray(_Buffer(self._state, out, size, 0), shape, dtype)

    def _resolve(self, value, what):
        """(buffer, offset, nbytes, dtype, writable, shape) of an array
        argument: a DeviceArray, or any array whose memory lies in one of
        this connection's shared buffers (see _array_view)."""
        if isinstance(value, DeviceArray):
            if value._buf.state is not self._state:
                raise ValueError("%s: a device array of another connection" % what)
            return value._buf, 0, value.nbytes, value.dtype, True, value.shape
        if type(value) is np.ndarray:  # the common case, inline: a few us per op count
            addr = value.__array_interface__["data"][0]
            flags = value.flags
            nbytes, dtype, writable, shape, contiguous = (
                value.nbytes, value.dtype, flags.writeable, value.shape, flags.c_contiguous)
            buf = _owner_buffer(value)
        else:
            addr, nbytes, dtype, writable, shape, contiguous, buf = _array_view(value, what)
        if buf is not None and buf.state is not self._state:
            buf = None
        # The whole extent must lie in one mapping: start <= addr and
        # addr + nbytes <= end.  (A non-contiguous array's nbytes is not its
        # extent: it is refused below, after its start is placed.)
        last = addr + nbytes if contiguous else addr
        straddles = None
        if buf is not None and not buf.start <= addr <= last <= buf.start + buf.nbytes:
            if buf.start <= addr < buf.start + buf.nbytes:
                straddles = buf
            buf = None
        if buf is None:
            for start, end, ref in self._regions.values():
                if start <= addr < end or (start == addr == last):
                    b = ref()
                    if b is None:
                        continue
                    if last <= end:
                        buf = b
                        break
                    straddles = b
        if buf is None:
            where = ""
            if straddles is not None:
                where = (" (its bytes [%d, %d) of shared buffer %d run %d bytes past "
                         "the buffer's end)" % (addr - straddles.start, last - straddles.start,
                                                straddles.id,
                                                last - straddles.start - straddles.nbytes))
            raise ValueError(
                "%s: this array is not in a shared buffer of this connection%s: "
                "allocate it in devq memory, with c.empty(shape, dtype), c.zeros(...) "
                "or c.array(x) (NumPy), devq.torch.empty(c, shape), devq.torch.zeros(...) "
                "or devq.torch.from_tensor(c, t) (PyTorch), and pass that or any view "
                "of it" % (what, where))
        if not contiguous:
            raise ValueError("%s: the array must be C-contiguous" % what)
        return buf, addr - buf.start, nbytes, dtype, writable, shape

    # queues --------------------------------------------------------------

    def open_queue(self, queue, priority=0):
        """Opens queue (an id of your choosing, 0 .. 2**32-1) with a priority
        (0 normal, 1 high).  submit() opens queues on first use with
        priority 0; opening an open queue again with its priority does
        nothing.  High priority is granted by the daemon (root, its own
        user, devqd's priority-users and priority-groups): anyone else's
        open is refused with permission_denied, asynchronously like any
        refusal of an open (errors(), and the queue's ops fail with it)."""
        self._check()
        queue = operator.index(queue)
        if not 0 <= queue < 1 << 32:
            raise ValueError("devq: queue id %d out of range (0 .. 2**32-1)" % queue)
        if queue in self._queues:
            return
        r = _dll.devq_queue_open_priority(self._h, queue, operator.index(priority))
        if r < 0:
            self._raise(r)
        self._queues[queue] = 0

    def reset_queue(self, queue):
        """Clears a queue's sticky failure: later ops no longer inherit it."""
        self._check()
        r = _dll.devq_queue_reset(self._h, operator.index(queue))
        if r < 0:
            self._raise(r)

    # ops -----------------------------------------------------------------

    def _waits(self, wait):
        out = []
        for w in wait:
            if isinstance(w, Op):
                if w._conn is not self:
                    raise ValueError("devq: wait on an op of another connection")
                out.append((w.queue, w.point))
            else:
                q, p = w
                out.append((operator.index(q), operator.index(p)))
        arr = (L.Wait * len(out))()
        for i, (q, p) in enumerate(out):
            arr[i].queue = q
            arr[i].point = p
        return arr

    def _bind(self, ex, params):
        """Checks params against ex's signature and fills its argument array;
        returns the buffers used.  Raises TypeError/ValueError, sending
        nothing."""
        if ex.params is None:
            raise ValueError("devq: cannot parse the signature of %s" % ex.where)
        where = ex.where
        names = ex.names
        for k in params:
            if k not in names:
                raise TypeError("%s() got an unexpected argument %r; signature: %s"
                                % (ex.name, k, where))
        refs = []
        counts = None  # dim name -> [(value a buffer gives it, why)]
        values = None
        shapes = None  # buffers of several dims: param -> the array's shape
        for i, p, slot in ex.bufs:
            if p.name not in params:
                raise TypeError("%s() missing array argument %r (%s); signature: %s"
                                % (ex.name, p.name, p.describe(), where))
            buf, offset, nbytes, dtype, writable, shape = self._resolve(
                params[p.name], "%s: argument %r (%s)" % (where, p.name, p.describe()))
            if p.type != "u8" and dtype != p.dtype:
                raise TypeError("%s: argument %r (%s) needs a %s array, got %s"
                                % (where, p.name, p.describe(), p.dtype, dtype))
            if p.access != "in" and not writable:
                raise ValueError("%s: argument %r (%s) is written but the array is read-only"
                                 % (where, p.name, p.describe()))
            size = p.dtype.itemsize
            if offset % size:
                raise ValueError("%s: argument %r: offset %d in its buffer is not a multiple "
                                 "of %d bytes" % (where, p.name, offset, size))
            if values is None:
                values, counts, shapes = {}, {}, {}
            values[p.name] = nbytes
            if len(p.dims) == 1:
                if p.extent_param:
                    k = nbytes // size
                    counts.setdefault(p.extent_param, []).append(
                        (k, "%s has %d elements" % (p.name, k)))
            else:
                # A matrix is checked by shape, not just by size: a (k, m)
                # array where (m, k) is wanted is refused.
                if len(shape) != len(p.dims):
                    raise ValueError("%s: argument %r (%s) needs a %d-dimensional array, "
                                     "got shape %r" % (where, p.name, p.describe(),
                                                       len(p.dims), shape))
                shapes[p.name] = shape
                for axis, d in enumerate(p.dims):
                    if isinstance(d, str):
                        counts.setdefault(d, []).append(
                            (shape[axis], "%s.shape[%d] is %d" % (p.name, axis, shape[axis])))
            slot.buf.buf = buf.ptr
            slot.buf.offset = offset
            refs.append(buf)
        scal = {}
        for i, p, slot, member, kind, lo, hi in ex.scalars:
            if p.name in params:
                v = params[p.name]
            elif counts and p.name in counts:
                c = counts[p.name]
                ns = set(k for k, _ in c)
                if len(ns) != 1:
                    raise ValueError(
                        "%s: cannot infer %s: %s%s"
                        % (where, p.name, ", ".join(sorted(why for _, why in c)),
                           self._shapes_story(ex, shapes)))
                v = ns.pop()
            else:
                raise TypeError("%s() missing argument %r (%s); signature: %s"
                                % (ex.name, p.name, p.type, where))
            if member is None:
                raise TypeError("%s: argument %r: %s scalars cannot be passed"
                                % (where, p.name, p.type))
            t = type(v)
            if kind == "int" and t is int:
                pass
            elif kind == "float" and (t is float or t is int):
                v = float(v)
            elif isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError("%s: argument %r (%s) needs a number, got %s"
                                % (where, p.name, p.type, t.__name__))
            elif kind == "int":
                if not isinstance(v, numbers.Integral):
                    raise TypeError("%s: argument %r (%s) needs an integer, got %r"
                                    % (where, p.name, p.type, v))
                v = int(v)
            else:
                v = float(v)
            if kind == "int" and not lo <= v <= hi:
                raise ValueError("%s: argument %r (%s) = %d out of range"
                                 % (where, p.name, p.type, v))
            setattr(slot, member, v)
            scal[p.name] = v
        for i, p, slot in ex.bufs:
            if len(p.dims) > 1:
                want = tuple(scal[d] if isinstance(d, str) else d for d in p.dims)
                if shapes[p.name] != want:
                    raise ValueError(
                        "%s: argument %r (%s) has shape %r, the signature wants (%s) = %r"
                        % (where, p.name, p.describe(), shapes[p.name],
                           ", ".join(str(d) for d in p.dims), want))
                continue
            n = scal[p.extent_param] if p.extent_param else p.extent_lit
            need = n * p.dtype.itemsize
            if need > values[p.name]:
                raise ValueError("%s: argument %r (%s) with %s=%d needs %d bytes, the array "
                                 "has %d" % (where, p.name, p.describe(),
                                             p.extent_param or "shape", n, need,
                                             values[p.name]))
        return refs

    def _queue_of(self, queue):
        if queue not in self._queues:
            self.open_queue(queue)

    def _send(self, op_struct, queue, executable, refs, keep, deadline_us=0):
        """Submits one prepared op (or adds it to the open batch)."""
        point = self._queues[queue] + 1
        op = Op(self, queue, point, executable, tuple(refs) if refs else None)
        if self._batch is not None:
            n = self._bn
            if op_struct._b_base_ is not self._bops:  # copy() and fill() build theirs
                if n == len(self._bops):
                    self._grow_batch()
                self._bops[n] = op_struct
            if deadline_us and not self._bext_on:
                # Entries before this one from an earlier batch: none.
                if self._bext is None or len(self._bext) < len(self._bops):
                    self._bext = (L.OpExt * len(self._bops))()
                for i in range(n):
                    self._bext[i].size = ctypes.sizeof(L.OpExt)
                    self._bext[i].deadline_us = 0
                self._bext_on = True
            if self._bext_on:
                self._bext[n].size = ctypes.sizeof(L.OpExt)
                self._bext[n].deadline_us = deadline_us
            self._bn = n + 1
            self._queues[queue] = point
            self._batch.append((keep, op))
            op._sent = False
            return op
        if deadline_us:
            ext = L.OpExt(size=ctypes.sizeof(L.OpExt), deadline_us=deadline_us)
            r = _dll.devq_submit_ex(self._h, ctypes.byref(op_struct), 1, None,
                                    ctypes.byref(ext))
        else:
            r = _dll.devq_submit(self._h, ctypes.byref(op_struct), 1, None)
        if r < 0:
            self._raise(r)
        self._queues[queue] = point
        inflight = self._inflight
        inflight[(queue, point)] = op
        if not len(inflight) & 63:
            # A loop that never waits: take what has arrived, so that
            # finished ops let their buffers go (a poll every 64 ops
            # costs little per op).
            self._drain()
        return op

    def submit(self, executable, _params=None, /, *, queue=0, wait=(), timing=True,
               deadline=None, **params):
        """Submits a kernel and returns its Op at once.

        executable: a name from executables(); parameters by keyword (or as
        a dict in the second argument, e.g. for a parameter named "queue").
        Buffers are arrays in this connection's shared buffers (from
        c.array/c.empty: any C-contiguous view, memoryview, tensor or DLPack
        producer over them) or DeviceArrays; a u64 parameter that shapes buffers (n) may be left
        out and is inferred from them: from the size of a one-dim buffer
        (x:in f32[n]), from the shape of a matrix (a:in f32[m,k] takes
        m, k from a.shape, and a must have exactly that shape).  queue: the queue id (opened on first
        use); wait: ops or (queue, point) pairs to wait for; timing=False
        skips device timing events (CUDA backend); deadline: seconds after
        the daemon receives the op by which the device must have started
        it, else it never runs and fails "deadline_exceeded" (None: no
        deadline).  Bad arguments raise TypeError or ValueError with the
        signature, sending nothing."""
        self._check()
        dl = _deadline_us(deadline)
        if _params:
            params = dict(_params, **params)
        execs = self._execs or self._load_execs()
        ex = execs.get(executable)
        if ex is None:
            raise ValueError("devq: unknown executable %r; the daemon has: %s"
                             % (executable, ", ".join(sorted(execs)) or "none"))
        if queue not in self._queues:
            queue = operator.index(queue)
        refs = self._bind(ex, params)
        waits = self._waits(wait) if wait else None
        self._queue_of(queue)
        if self._batch is not None:
            args = ex.args_type.from_buffer_copy(ex.args)
            if self._bn == len(self._bops):
                self._grow_batch()
            op = self._bops[self._bn]  # written in place: a view of the array
        else:
            args = ex.args
            op = self._op1
        op.queue = queue
        op.kind = L.OP_KERNEL
        op.exec = ex.ptr
        op.args = args
        op.nargs = len(ex.params)
        op.waits = waits
        op.nwaits = len(waits) if waits else 0
        op.no_timing = not timing
        op.src = op.dst = None
        return self._send(op, queue, executable, refs, (args, waits), dl)

    def copy(self, dst, src, nbytes=None, *, queue=0, wait=(), deadline=None):
        """Copies nbytes (default: all of src, which must then be the size of
        dst) from src to dst; either is a shared-buffer array (or view) or
        a DeviceArray.  deadline: as for submit.  Returns an Op."""
        self._check()
        dl = _deadline_us(deadline)
        sb, so, sn, _, _, _ = self._resolve(src, "copy source")
        db, do, dn, _, dw, _ = self._resolve(dst, "copy destination")
        if not dw:
            raise ValueError("copy destination: the array is read-only")
        if nbytes is None:
            if sn != dn:
                raise ValueError("copy: source has %d bytes, destination %d; pass nbytes="
                                 % (sn, dn))
            nbytes = sn
        nbytes = operator.index(nbytes)
        if not 0 <= nbytes <= min(sn, dn):
            raise ValueError("copy: %d bytes do not fit (source %d, destination %d)"
                             % (nbytes, sn, dn))
        waits = self._waits(wait) if wait else None
        queue = operator.index(queue)
        self._queue_of(queue)
        op = L.Op(queue=queue, kind=L.OP_COPY, src=sb.ptr, dst=db.ptr, src_offset=so,
                  dst_offset=do, size=nbytes, waits=waits, nwaits=len(waits) if waits else 0)
        return self._send(op, queue, "copy", (sb, db), waits, dl)

    def fill(self, dst, value, *, queue=0, wait=(), deadline=None):
        """Fills dst (a shared-buffer array or view, or a DeviceArray) with
        value, converted to dst's dtype.  The device fills 32-bit patterns:
        dst's size and offset must be multiples of 4 bytes, and an 8-byte
        value must have equal halves (0, for instance).  deadline: as for
        submit.  Returns an Op."""
        self._check()
        dl = _deadline_us(deadline)
        db, do, dn, dtype, dw, _ = self._resolve(dst, "fill destination")
        if not dw:
            raise ValueError("fill destination: the array is read-only")
        raw = np.array(value, dtype=dtype).tobytes()
        if len(raw) in (1, 2):
            raw = raw * (4 // len(raw))
        elif len(raw) == 8 and raw[:4] == raw[4:]:
            raw = raw[:4]
        if len(raw) != 4:
            raise ValueError("fill: %r as %s is not a repeating 32-bit pattern" % (value, dtype))
        if dn % 4 or do % 4:
            raise ValueError("fill: size %d and offset %d must be multiples of 4 bytes"
                             % (dn, do))
        pattern = int.from_bytes(raw, sys.byteorder)
        waits = self._waits(wait) if wait else None
        queue = operator.index(queue)
        self._queue_of(queue)
        op = L.Op(queue=queue, kind=L.OP_FILL, dst=db.ptr, dst_offset=do, size=dn,
                  pattern=pattern, waits=waits, nwaits=len(waits) if waits else 0)
        return self._send(op, queue, "fill", (db,), waits, dl)

    @contextlib.contextmanager
    def batch(self):
        """Ops submitted inside the with-block go to the daemon as one
        message when it ends (their points are known at once; result() on
        one of them inside the block raises).  An exception discards them."""
        self._check()
        if self._batch is not None:
            raise RuntimeError("devq: batches do not nest")
        self._batch = []
        counts = dict(self._queues)
        ok = False
        try:
            yield self
            ok = True
        finally:
            pending, self._batch = self._batch, None
            n, self._bn = self._bn, 0
            ext, self._bext_on = self._bext_on, False
            if not ok or not pending:
                self._queues.update(counts)
            else:
                if ext:
                    r = _dll.devq_submit_ex(self._h, self._bops, n, None, self._bext)
                else:
                    r = _dll.devq_submit(self._h, self._bops, n, None)
                if r < 0:
                    self._queues.update(counts)
                    try:
                        self._raise(r)
                    except Error as e:  # the batch's ops never went out
                        for _, op in pending:
                            op._fail(Error(e.code, e.message, queue=op.queue,
                                           point=op.point, errno=e.errno))
                        raise
                inflight = self._inflight
                for _, op in pending:
                    op._sent = True
                    inflight[(op.queue, op.point)] = op

    def _grow_batch(self):
        new = (L.Op * (2 * len(self._bops)))()
        ctypes.memmove(new, self._bops, ctypes.sizeof(self._bops))
        self._bops = new
        if self._bext is not None:
            ext = (L.OpExt * len(new))()
            ctypes.memmove(ext, self._bext, ctypes.sizeof(self._bext))
            self._bext = ext

    # status and errors ---------------------------------------------------

    def status(self):
        """The daemon's status (a round trip): totals and the sessions this
        user may see, with this connection's as .session."""
        self._check()
        p = ctypes.POINTER(L.Status)()
        r = _dll.devq_get_status(self._h, ctypes.byref(p))
        if r < 0:
            self._raise(r)
        try:
            s = p.contents
            sessions = []
            mine = None
            for i in range(s.nsessions):
                x = s.sessions[i]
                depths = {x.queue_depths[j].queue: x.queue_depths[j].depth
                          for j in range(x.nqueues_depth)}
                ss = SessionStatus(x.id, x.pid, x.uid, x.name.decode(errors="replace"),
                                   x.queues, x.buffers, x.ops_in_flight, x.bytes_mapped,
                                   x.ops_completed, x.ops_failed, depths)
                sessions.append(ss)
                if x.id == self.info.session:
                    mine = ss
            errs = {CODES[i]: s.op_errors[i] for i in range(1, len(CODES)) if s.op_errors[i]}
            return Status(s.backend.decode(), s.device.decode(errors="replace"), s.streams,
                          s.uptime_ns, s.ops_in_flight, s.bytes_mapped, s.sessions_total,
                          s.ops_completed, s.ops_failed, s.buffers, s.device_busy_ns, errs,
                          sessions, mine,
                          {s.refused[i].uid: (s.refused[i].losses, s.refused[i].until_s)
                           for i in range(s.nrefused)},
                          [TenantStatus(t.name.decode(errors="replace"), t.uid, t.weight,
                                        t.sessions, t.ops_waiting, t.queued_ns, t.ops_inside,
                                        t.ops_done, t.device_ns, t.wait_ns, t.wait_max_ns,
                                        t.waits, s.tenant_extra[i].deadline_exceeded)
                           for i, t in ((i, s.tenants[i]) for i in range(s.ntenants))])
        finally:
            _dll.devq_status_free(p)

    def errors(self):
        """Asynchronous errors not tied to an op (a failed queue open, a
        refused release...), oldest first, as devq.Error; clears them."""
        self._check()
        self._drain()
        out = []
        e = L.Error()
        while _dll.devq_next_error(self._h, ctypes.byref(e)) == 1:
            out.append(Error(CODES[e.code] if 0 <= e.code < len(CODES) else "unknown",
                             e.message.decode(errors="replace"),
                             request=e.request.decode(errors="replace"),
                             queue=e.queue if e.has_queue else None,
                             buffer=e.buffer if e.has_buffer else None))
        return out

    @property
    def in_flight(self):
        """Number of ops submitted whose completion has not been seen."""
        return len(self._inflight)

    @property
    def buffers(self):
        """Number of this connection's buffers (shared and device) not yet
        freed: alive, or released and awaiting the daemon's BufferReleased."""
        return self._nbuf
