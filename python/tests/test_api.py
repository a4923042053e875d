# SPDX-License-Identifier: Apache-2.0
"""The rest of the surface: batches, queues and waits, info and status,
the signature parser, the ctypes layouts against devq.h, help(devq)."""

import os
import pydoc
import shutil
import subprocess

import numpy as np
import pytest

import devq
from devq import _sig
import devq._lib as _lib
from conftest import SLOW

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER_DIR = os.path.join(HERE, "..", "..", "client")


def test_batch_one_message(conn):
    c = conn
    x = c.zeros((64,), np.uint32)
    with c.batch():
        ops = [c.submit("spin", ns=0, queue=5) for _ in range(100)]
        fill = c.fill(x, 9, queue=6, wait=[ops[-1]])
        with pytest.raises(RuntimeError, match="batch"):
            ops[0].result()
    assert [op.point for op in ops] == list(range(1, 101))
    assert fill.result(timeout=10 * SLOW).point == (6, 1)
    assert all(op.done() for op in ops) and (x == 9).all()
    # an exception discards the batch: nothing sent, points reused
    with pytest.raises(KeyError):
        with c.batch():
            c.submit("spin", ns=0, queue=5)
            raise KeyError("no")
    assert c.submit("spin", ns=0, queue=5).result(timeout=10 * SLOW).point == (5, 101)


def test_queues_waits_priority(conn):
    c = conn
    c.open_queue(7, priority=1)
    a = c.submit("spin", ns=50_000_000, queue=7)
    b = c.submit("spin", ns=0, queue=8, wait=[(7, 1)])
    rb = b.result(timeout=10 * SLOW)
    assert rb.timing.device_start >= a.result().timing.device_end
    with pytest.raises(ValueError, match="out of range"):
        c.open_queue(1 << 32)
    s = c.status().session
    assert {7, 8} <= set(s.queue_depths)


def test_info_status_repr(conn):
    c = conn
    assert c.info.backend == "cpu" and c.info.protocol >= 1 and c.info.session > 0
    c.submit("spin", ns=0).result(timeout=10 * SLOW)
    st = c.status()
    assert st.backend == "cpu" and st.streams >= 1 and st.session.id == c.info.session
    assert st.session.ops_completed == 1 and st.session.name
    assert st.refused == {}  # no uid refused after device losses
    assert "session %d" % c.info.session in repr(c)
    assert c.in_flight == 0


def test_signature_parser():
    p = _sig.parse("n:u64, a:f32, x:in f32[n], y:inout f32[n]")
    assert [q.describe() for q in p] == ["n:u64", "a:f32", "x:in f32[n]", "y:inout f32[n]"]
    assert p[3].extent_param == "n" and p[3].dtype == np.float32
    assert _sig.parse(" out : out f32 [ 1 ] ")[0].extent_lit == 1
    assert _sig.parse("") == ()
    m = _sig.parse(" m : u64 , k:u64, a : in f32 [ m , k ] , b:out f64[2,m,3, k]")
    assert [q.describe() for q in m] == ["m:u64", "k:u64", "a:in f32[m,k]", "b:out f64[2,m,3,k]"]
    assert m[2].dims == ("m", "k") and m[3].dims == (2, "m", 3, "k")
    assert m[2].extent_param is None and m[2].extent_lit == 0
    assert len(_sig.parse(", ".join("a%d:u8" % i for i in range(16)))) == 16
    for bad in ("a:f16", "x:in f32", "a:u64[1]", "x:in f32[m]", "a:f32, x:in u8[a]",
                "a:u64, a:u64", "1a:u64", "x:in f32[0]", "a:u64,",
                "m:u64, x:in f32[m,]", "m:u64, x:in f32[m,0]", "m:u64, x:in f32[m,q]",
                "m:u64, x:in u8[m,m,m,m,m]", ", ".join("a%d:u8" % i for i in range(17))):
        with pytest.raises(ValueError):
            _sig.parse(bad)


def test_every_daemon_signature_parses(conn):
    for name, sig in conn.executables().items():
        params = _sig.parse(sig)
        assert params, name


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler to read devq.h with")
def test_ctypes_layouts_match_devq_h(tmp_path):
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "devq.h"',
             "int main(void) {"]
    for cname, py in _lib.STRUCTS.items():
        lines.append('printf("%%s %%zu\\n", "%s", sizeof(struct %s));' % (cname, cname))
        for f in py._fields_:
            lines.append('printf("%%s.%%s %%zu\\n", "%s", "%s", offsetof(struct %s, %s));'
                         % (cname, f[0], cname, f[0]))
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", "-I", HEADER_DIR, str(src), "-o", str(exe)], check=True)
    got = dict(l.rsplit(" ", 1) for l in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True).stdout.splitlines())
    import ctypes
    for cname, py in _lib.STRUCTS.items():
        assert int(got[cname]) == ctypes.sizeof(py), cname
        for f in py._fields_:
            assert int(got["%s.%s" % (cname, f[0])]) == getattr(py, f[0]).offset, (cname, f[0])


def test_help_is_useful():
    text = pydoc.render_doc(devq, renderer=pydoc.plaintext)
    for word in ("c.array", "await op", "ThreadError", "out_of_range", "ctypes",
                 "class Connection", "submit(self, executable", "result(self, timeout=None)"):
        assert word in text, word
    for obj in (devq.connect, devq.Connection.submit, devq.Connection.copy,
                devq.Connection.fill, devq.Op.result, devq.Timing, devq.Error):
        assert obj.__doc__ and len(obj.__doc__) > 40, obj
