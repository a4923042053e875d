# SPDX-License-Identifier: Apache-2.0
"""The signature language of kernels/sig.c, parsed in Python.

    param  := name ':' type                       scalar, passed by value
            | name ':' access type '[' shape ']'  buffer
    access := in | out | inout
    shape  := positive integer | name of an earlier u64 scalar

e.g. "n:u64, a:f32, x:in f32[n], y:inout f32[n]".  The daemon validates
every submission against the same text; parsing it here lets the binding
refuse bad arguments before anything is sent, naming the signature.
"""

import re
from typing import NamedTuple, Optional

import numpy as np

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
    r"(?:\[\s*(?P<shape>[^\s\]]+)\s*\])?\s*\Z"
)


class Param(NamedTuple):
    name: str
    access: str  # "scalar", "in", "out", "inout"
    type: str  # "u8", "f32", ...
    extent_lit: int = 0  # buffers: a literal shape
    extent_param: Optional[str] = None  # buffers: the u64 scalar naming it

    @property
    def is_buffer(self):
        return self.access != "scalar"

    @property
    def dtype(self):
        return TYPES[self.type]

    def describe(self):
        if not self.is_buffer:
            return "%s:%s" % (self.name, self.type)
        shape = self.extent_param or str(self.extent_lit)
        return "%s:%s %s[%s]" % (self.name, self.access, self.type, shape)


def parse(text):
    """Parses a signature into a tuple of Param; ValueError when malformed."""
    params = []
    text = text.strip()
    if not text:
        return ()
    for i, part in enumerate(text.split(",")):
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
        if shape.isdigit():
            if int(shape) == 0:
                raise ValueError("signature %r: shape of %r must be positive" % (text, name))
            params.append(Param(name, access, typ, extent_lit=int(shape)))
        else:
            ref = [p for p in params if p.name == shape]
            if not ref or ref[0].access != "scalar" or ref[0].type != "u64":
                raise ValueError(
                    "signature %r: shape %r of %r is not an earlier u64 scalar"
                    % (text, shape, name)
                )
            params.append(Param(name, access, typ, extent_param=shape))
    return tuple(params)
