# SPDX-License-Identifier: Apache-2.0
"""The signature language of kernels/sig.c, parsed in Python.

    param  := name ':' type                       scalar, passed by value
            | name ':' access type '[' shape ']'  buffer
    access := in | out | inout
    shape  := dim (',' dim)*                       at most MAX_DIMS
    dim    := positive integer | name of an earlier u64 scalar

e.g. "n:u64, a:f32, x:in f32[n], y:inout f32[n]", or a matrix:
"m:u64, k:u64, a:in f32[m,k]" (row-major, contiguous).  The daemon
validates every submission against the same text; parsing it here lets the
binding refuse bad arguments before anything is sent, naming the signature.
"""

import re
from typing import NamedTuple, Tuple, Union

import numpy as np

MAX_PARAMS = 16  # DEVQ_MAX_PARAMS
MAX_DIMS = 4  # DEVQ_MAX_DIMS

# type name -> (numpy dtype, size in bytes)
TYPES = {
    "u8": np.dtype(np.uint8),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PARAM = re.compile(
    r"\s*(?P<name>[^\s:,\[\]]+)\s*:\s*"
    r"(?:(?P<access>in|out|inout)\s+)?(?P<type>[^\s:,\[\]]+)\s*"
    r"(?:\[(?P<shape>[^\[\]]*)\])?\s*\Z"
)


class Param(NamedTuple):
    name: str
    access: str  # "scalar", "in", "out", "inout"
    type: str  # "u8", "f32", ...
    dims: Tuple[Union[int, str], ...] = ()  # buffers: literal or u64 scalar name, per dim

    @property
    def is_buffer(self):
        return self.access != "scalar"

    @property
    def dtype(self):
        return TYPES[self.type]

    @property
    def extent_param(self):
        """The u64 scalar that is a one-dim buffer's whole shape, or None."""
        return self.dims[0] if len(self.dims) == 1 and isinstance(self.dims[0], str) else None

    @property
    def extent_lit(self):
        """A one-dim buffer's literal shape, else 0."""
        return self.dims[0] if len(self.dims) == 1 and isinstance(self.dims[0], int) else 0

    def describe(self):
        if not self.is_buffer:
            return "%s:%s" % (self.name, self.type)
        return "%s:%s %s[%s]" % (self.name, self.access, self.type,
                                 ",".join(str(d) for d in self.dims))


def _split(text):
    """The parameters' texts: commas inside [...] separate dims, not
    parameters."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse(text):
    """Parses a signature into a tuple of Param; ValueError when malformed."""
    params = []
    text = text.strip()
    if not text:
        return ()
    parts = _split(text)
    if len(parts) > MAX_PARAMS:
        raise ValueError("signature %r: more than %d parameters" % (text, MAX_PARAMS))
    for i, part in enumerate(parts):
        m = _PARAM.match(part)
        if not m:
            raise ValueError("signature %r: parameter %d is malformed" % (text, i + 1))
        name, access, typ, shape = m.group("name", "access", "type", "shape")
        if not _IDENT.match(name):
            raise ValueError("signature %r: invalid name %r" % (text, name))
        if typ not in TYPES:
            raise ValueError("signature %r: unknown type %r" % (text, typ))
        if any(p.name == name for p in params):
            raise ValueError("signature %r: duplicate name %r" % (text, name))
        if access is None:
            if shape is not None:
                raise ValueError("signature %r: scalar %r has a shape" % (text, name))
            params.append(Param(name, "scalar", typ))
            continue
        if shape is None:
            raise ValueError("signature %r: buffer %r has no shape" % (text, name))
        dims = []
        for d in shape.split(","):
            d = d.strip()
            if d.isdigit():
                if int(d) == 0:
                    raise ValueError("signature %r: shape of %r must be positive" % (text, name))
                dims.append(int(d))
                continue
            ref = [p for p in params if p.name == d]
            if not ref or ref[0].access != "scalar" or ref[0].type != "u64":
                raise ValueError(
                    "signature %r: shape %r of %r is not an earlier u64 scalar"
                    % (text, d, name)
                )
            dims.append(d)
        if len(dims) > MAX_DIMS:
            raise ValueError("signature %r: shape of %r has more than %d dimensions"
                             % (text, name, MAX_DIMS))
        params.append(Param(name, access, typ, dims=tuple(dims)))
    return tuple(params)
