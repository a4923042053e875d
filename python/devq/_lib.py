# SPDX-License-Identifier: Apache-2.0
"""ctypes declarations of client/devq.h and the loading of libdevq.so.0.

Every structure here mirrors devq.h field for field; python/tests/test_api.py
(test_ctypes_layouts_match_devq_h) compiles a C program that prints
sizeof/offsetof of each and compares them with these, so a change to devq.h
that is not carried over fails the suite.
"""

import ctypes
import ctypes.util
import os

c_u8 = ctypes.c_uint8
c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_int = ctypes.c_int
c_bool = ctypes.c_bool
c_size = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p

# enum devq_code: the protocol's Code enum, by value.
CODE_NAMES = (
    "ok",
    "invalid_argument",
    "not_found",
    "out_of_range",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "dependency_failed",
    "device_error",
    "device_lost",
    "protocol_error",
    "cancelled",
    "deadline_exceeded",
)

BUFFER_SHARED = 0
BUFFER_DEVICE = 1

# enum devq_arg_type
ARG_U64, ARG_U32, ARG_I64, ARG_I32, ARG_F32, ARG_F64, ARG_BUFFER = range(7)

# enum devq_op_kind
OP_KERNEL, OP_COPY, OP_FILL = range(3)

# enum devq_point_state
POINT_PENDING, POINT_OK, POINT_SEE_RECORD = range(3)


class Info(ctypes.Structure):
    _fields_ = [
        ("version", c_u32),
        ("daemon_version", ctypes.c_char * 32),
        ("backend", ctypes.c_char * 16),
        ("device", ctypes.c_char * 128),
        ("streams", c_u32),
        ("max_frame", c_u32),
        ("max_fds", c_u32),
        ("max_op_ns", c_u64),
        ("session", c_u64),
        ("daemon_min_version", c_u32),
        ("daemon_max_version", c_u32),
    ]


class Buffer(ctypes.Structure):
    pass


Buffer._fields_ = [
    ("id", c_u64),
    ("size", c_u64),
    ("kind", c_int),
    ("map", c_void_p),
    ("read_only", c_bool),
    ("released", c_bool),
    ("lost", c_bool),
    # libdevq keeps its own fields beside the handles it makes: handles are
    # only ever used through pointers libdevq returned.
]


class Exec(ctypes.Structure):
    _fields_ = [
        ("id", c_u32),
        ("name", ctypes.c_char * 32),
        ("signature", ctypes.c_char * 256),
    ]


class _ArgBuf(ctypes.Structure):
    _fields_ = [("buf", ctypes.POINTER(Buffer)), ("offset", c_u64)]


class _ArgValue(ctypes.Union):
    _fields_ = [
        ("u64", c_u64),
        ("u32", c_u32),
        ("i64", ctypes.c_int64),
        ("i32", ctypes.c_int32),
        ("f32", ctypes.c_float),
        ("f64", ctypes.c_double),
        ("buf", _ArgBuf),
    ]


class Arg(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("type", c_int), ("v", _ArgValue)]


class Wait(ctypes.Structure):
    _fields_ = [("queue", c_u32), ("point", c_u64)]


class Op(ctypes.Structure):
    _fields_ = [
        ("queue", c_u32),
        ("kind", c_int),
        ("exec", ctypes.POINTER(Exec)),
        ("args", ctypes.POINTER(Arg)),
        ("nargs", c_size),
        ("src", ctypes.POINTER(Buffer)),
        ("dst", ctypes.POINTER(Buffer)),
        ("src_offset", c_u64),
        ("dst_offset", c_u64),
        ("size", c_u64),
        ("pattern", c_u32),
        ("waits", ctypes.POINTER(Wait)),
        ("nwaits", c_size),
        ("no_timing", c_bool),
    ]


class OpExt(ctypes.Structure):
    """struct devq_op_ext: per-op options of devq_submit_ex."""

    _fields_ = [("size", c_u32), ("reserved", c_u32), ("deadline_us", c_u64)]


TIMING_FIELDS = (
    "client_submit",
    "received",
    "handoff",
    "device_start",
    "device_end",
    "observed",
    "client_received",
    "enqueue_ns",
)


class Timing(ctypes.Structure):
    _fields_ = [(f, c_u64) for f in TIMING_FIELDS]


class Completion(ctypes.Structure):
    _fields_ = [
        ("queue", c_u32),
        ("point", c_u64),
        ("code", c_int),
        ("message", ctypes.c_char * 160),
        ("t", Timing),
    ]


class Error(ctypes.Structure):
    _fields_ = [
        ("code", c_int),
        ("request", ctypes.c_char * 32),
        ("message", ctypes.c_char * 256),
        ("has_buffer", c_bool),
        ("has_queue", c_bool),
        ("buffer", c_u64),
        ("queue", c_u32),
    ]


class QueueDepth(ctypes.Structure):
    _fields_ = [("queue", c_u32), ("stream", c_u32), ("depth", c_u64)]


class SessionInfo(ctypes.Structure):
    _fields_ = [
        ("id", c_u64),
        ("pid", c_u32),
        ("uid", c_u32),
        ("name", ctypes.c_char * 64),
        ("queues", c_u32),
        ("buffers", c_u32),
        ("ops_in_flight", c_u64),
        ("bytes_mapped", c_u64),
        ("ops_completed", c_u64),
        ("ops_failed", c_u64),
        ("nqueues_depth", c_size),
        ("queue_depths", ctypes.POINTER(QueueDepth)),
    ]


class UserInfo(ctypes.Structure):
    _fields_ = [
        ("uid", c_u32),
        ("ops_completed", c_u64),
        ("ops_failed", c_u64),
        ("device_busy_ns", c_u64),
    ]


HIST_MAX_BOUNDS = 32


class RefusedUser(ctypes.Structure):
    _fields_ = [
        ("uid", c_u32),
        ("losses", c_u32),
        ("until_s", ctypes.c_int64),
    ]


class Histogram(ctypes.Structure):
    _fields_ = [
        ("phase", ctypes.c_char * 16),
        ("nbounds", c_size),
        ("le_ns", c_u64 * HIST_MAX_BOUNDS),
        ("counts", c_u64 * (HIST_MAX_BOUNDS + 1)),
        ("sum_ns", c_u64),
        ("count", c_u64),
    ]


class TenantInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 72),
        ("uid", c_u32),
        ("weight", c_u32),
        ("sessions", c_u32),
        ("ops_waiting", c_u64),
        ("queued_ns", c_u64),
        ("ops_inside", c_u32),
        ("ops_done", c_u64),
        ("device_ns", c_u64),
        ("wait_ns", c_u64),
        ("wait_max_ns", c_u64),
        ("waits", c_u64),
    ]


class TenantExtra(ctypes.Structure):
    _fields_ = [
        ("nop_seconds", c_size),
        ("op_seconds", Histogram * 3),
        ("nlabels", c_size),
        ("labels", (ctypes.c_char * 128) * 8),
        ("deadline_exceeded", c_u64),
    ]


class Status(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_char * 16),
        ("device", ctypes.c_char * 128),
        ("streams", c_u32),
        ("uptime_ns", c_u64),
        ("ops_in_flight", c_u64),
        ("bytes_mapped", c_u64),
        ("sessions_total", c_u64),
        ("ops_completed", c_u64),
        ("ops_failed", c_u64),
        ("buffers", c_u32),
        ("nsessions", c_size),
        ("sessions", ctypes.POINTER(SessionInfo)),
        ("op_errors", c_u64 * 16),
        ("device_busy_ns", c_u64),
        ("nusers", c_size),
        ("users", ctypes.POINTER(UserInfo)),
        ("nphases", c_size),
        ("phases", Histogram * 8),
        ("nrefused", c_size),
        ("refused", ctypes.POINTER(RefusedUser)),
        ("ntenants", c_size),
        ("tenants", ctypes.POINTER(TenantInfo)),
        ("gpu", ctypes.c_char * 16),
        ("uuid", ctypes.c_char * 64),
        ("device_stalled", c_bool),
        ("sessions_live", c_size),
        ("tenant_extra", ctypes.POINTER(TenantExtra)),
    ]


# Every structure whose layout python/tests/test_api.py checks against devq.h.
STRUCTS = {
    "devq_info": Info,
    "devq_buffer": Buffer,
    "devq_exec": Exec,
    "devq_arg": Arg,
    "devq_wait": Wait,
    "devq_op": Op,
    "devq_op_ext": OpExt,
    "devq_timing": Timing,
    "devq_completion": Completion,
    "devq_error": Error,
    "devq_queue_depth": QueueDepth,
    "devq_session_info": SessionInfo,
    "devq_user_info": UserInfo,
    "devq_histogram": Histogram,
    "devq_refused_user": RefusedUser,
    "devq_tenant_info": TenantInfo,
    "devq_tenant_extra": TenantExtra,
    "devq_status": Status,
}

_P = ctypes.POINTER
_PROTOS = {
    # name: (restype, argtypes)
    "devq_code_name": (c_char_p, [c_int]),
    "devq_connect": (c_int, [c_char_p, c_char_p, _P(c_void_p)]),
    "devq_disconnect": (None, [c_void_p]),
    "devq_get_info": (_P(Info), [c_void_p]),
    "devq_last_error": (c_char_p, [c_void_p]),
    "devq_fd": (c_int, [c_void_p]),
    "devq_buffer_create": (c_int, [c_void_p, c_u64, c_int, _P(_P(Buffer))]),
    "devq_buffer_import": (c_int, [c_void_p, c_int, c_u64, ctypes.c_uint, _P(_P(Buffer))]),
    "devq_buffer_release": (c_int, [c_void_p, _P(Buffer)]),
    "devq_buffer_wait_released": (c_int, [c_void_p, _P(Buffer), c_int]),
    "devq_exec_list": (c_int, [c_void_p, _P(_P(Exec)), _P(c_size)]),
    "devq_queue_open_priority": (c_int, [c_void_p, c_u32, c_int]),
    "devq_queue_reset": (c_int, [c_void_p, c_u32]),
    "devq_submit": (c_int, [c_void_p, _P(Op), c_size, _P(c_u64)]),
    "devq_submit_ex": (c_int, [c_void_p, _P(Op), c_size, _P(c_u64), _P(OpExt)]),
    "devq_next_completion": (c_int, [c_void_p, _P(Completion), c_int]),
    "devq_completed": (c_u64, [c_void_p, c_u32]),
    "devq_poll": (c_int, [c_void_p]),
    "devq_next_error": (c_int, [c_void_p, _P(Error)]),
    "devq_get_status": (c_int, [c_void_p, _P(_P(Status))]),
    "devq_status_free": (None, [_P(Status)]),
}


def _candidates():
    env = os.environ.get("DEVQ_LIBRARY")
    if env:
        # An explicit choice: no fallback that would hide a wrong path.
        return [env]
    out = []
    # In the build tree: build/python/devq/_lib.py beside build/libdevq.so.0.
    here = os.path.dirname(os.path.abspath(__file__))
    local = os.path.join(os.path.dirname(os.path.dirname(here)), "libdevq.so.0")
    if os.path.exists(local):
        out.append(local)
    out.append("libdevq.so.0")  # installed: the dynamic linker's search path
    found = ctypes.util.find_library("devq")
    if found and found not in out:
        out.append(found)
    return out


def _major_minor(version):
    """(MAJOR, MINOR) of "MAJOR.MINOR.PATCH", None when it is not one."""
    parts = version.split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


def _too_old(lib, package_version):
    """Why lib cannot serve this package (its MAJOR.MINOR is older than the
    package's: the package may call what that library lacks), or None."""
    want = _major_minor(package_version or "")
    if want is None:
        return None  # a source tree without a version: nothing to compare
    fn = getattr(lib, "devq_version", None)
    if fn is None:
        return "it has no devq_version(), so it is older than %d.%d" % want
    fn.restype = c_char_p
    fn.argtypes = []
    have_text = (fn() or b"").decode(errors="replace")
    have = _major_minor(have_text)
    if have is None or have < want:
        return "it is libdevq %s, older than %d.%d, which devq %s needs" % (
            have_text or "?", want[0], want[1], package_version)
    return None


def load(package_version=None):
    """Loads libdevq and declares its functions.  Raises ImportError naming
    every place tried, what failed there, the Debian package libdevq0 and
    $DEVQ_LIBRARY: a missing or too old library is a package that cannot
    be imported, not an OS failure."""
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        why = _too_old(lib, package_version)
        if why is None:
            missing = [name for name in _PROTOS if not hasattr(lib, name)]
            if missing:
                why = "it lacks %s" % ", ".join(missing)
        if why is not None:
            tried.append("%s (%s)" % (path, why))
            continue
        for name, (res, args) in _PROTOS.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        return lib, path
    want = _major_minor(package_version or "")
    raise ImportError(
        "devq: cannot load libdevq.so.0%s: install the Debian package libdevq0 "
        "(apt-get install libdevq0), or set DEVQ_LIBRARY to the library's path; "
        "tried: %s" % (" (%d.%d or newer)" % want if want else "", "; ".join(tried)),
        name="devq")
