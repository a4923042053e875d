#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Self-test of tools/check_layers.py, run by make check-layers before it
checks the tree: small trees planted in a temporary folder, built with the
C compiler ($CC, default cc), each with a circle the objects alone do not
show (a call through an inline function leaves no symbol), and the checker
must fail on every one; the same trees without the circle must pass.
Python 3 standard library only."""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "check_layers.py")
CC = os.environ.get("CC", "cc").split()


def plant(files):
    """A tree holding files ({path: text}), its .c built under obj/."""
    root = tempfile.mkdtemp(prefix="check-layers-")
    for path, text in files.items():
        p = os.path.join(root, path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(textwrap.dedent(text))
    for path in files:
        if path.endswith(".c"):
            o = os.path.join(root, "obj", path[:-2] + ".o")
            os.makedirs(os.path.dirname(o), exist_ok=True)
            subprocess.run(CC + ["-std=c11", "-O2", "-Wall", "-Werror", "-c",
                                 "-I" + os.path.join(root, "daemon"),
                                 os.path.join(root, path), "-o", o], check=True)
    return root


def check(root):
    r = subprocess.run([sys.executable, CHECKER, "--root", root, os.path.join(root, "obj")],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


# The circle devq had in daemon/core/: a.c calls b.h's inline function (it
# only counts, as quota.h's devq_quota_op did), b.c calls c.c, c.c calls
# a.c.  nm sees b -> c -> a, and nothing of a -> b.
INLINE_CALL = {
    "daemon/core/a.h": """
        void a_init(int *n);
        void a_done(int *n);
    """,
    "daemon/core/a.c": """
        #include "core/a.h"
        #include "core/b.h"
        void a_init(int *n) { *n = 0; }
        void a_done(int *n) { b_count(n); }
    """,
    "daemon/core/b.h": """
        int b_get(int *n);
        /* Counts: no call of its own. */
        static inline void b_count(int *n)
        {
        	++*n;
        }
    """,
    "daemon/core/b.c": """
        #include "core/b.h"
        #include "core/c.h"
        int b_get(int *n) { return c_get(n); }
    """,
    "daemon/core/c.h": """
        int c_get(int *n);
    """,
    "daemon/core/c.c": """
        #include "core/a.h"
        #include "core/c.h"
        int c_get(int *n) { a_init(n); return *n; }
    """,
}

# The circle through an inline function's own call: a.c calls b.h's
# b_touch, which calls c.h's inline c_touch (a room with no object of its
# own between them), and c.c calls a.c.
INLINE_BODY = {
    "daemon/core/a.h": """
        void a_fn(int *n);
    """,
    "daemon/core/a.c": """
        #include "core/a.h"
        #include "core/b.h"
        void a_fn(int *n) { b_touch(n); }
    """,
    "daemon/core/b.h": """
        #include "core/c.h"
        static inline void b_touch(int *n)
        {
        	c_touch(n);
        }
    """,
    "daemon/core/c.h": """
        void c_fn(int *n);
        static inline void c_touch(int *n)
        {
        	*n += 2;
        }
    """,
    "daemon/core/c.c": """
        #include "core/a.h"
        #include "core/c.h"
        void c_fn(int *n) { a_fn(n); }
    """,
}

# No circle among files, one between a folder and what lies beside it:
# device/x.c calls sub/y.c, sub/z.c calls device/x.c.
FOLDERS = {
    "daemon/device/x.h": """
        int x_fn(int n);
        int x_use(int n);
    """,
    "daemon/device/x.c": """
        #include "device/x.h"
        #include "device/sub/y.h"
        int x_fn(int n) { return n + 1; }
        int x_use(int n) { return y_fn(n); }
    """,
    "daemon/device/sub/y.h": """
        int y_fn(int n);
    """,
    "daemon/device/sub/y.c": """
        #include "device/sub/y.h"
        int y_fn(int n) { return n * 2; }
    """,
    "daemon/device/sub/z.c": """
        #include "device/x.h"
        int z_fn(int n);
        int z_fn(int n) { return x_fn(n); }
    """,
}


class PlantedCycles(unittest.TestCase):
    def run_tree(self, files):
        root = plant(files)
        self.addCleanup(shutil.rmtree, root)
        return check(root)

    def fails(self, files, folder, names):
        rc, out = self.run_tree(files)
        self.assertEqual(rc, 1, out)
        lines = [ln for ln in out.splitlines() if f"cycle in {folder}" in ln]
        self.assertEqual(len(lines), 1, out)
        for n in names:
            self.assertIn(n, lines[0])

    def test_inline_call_cycle_fails(self):
        self.fails(INLINE_CALL, "daemon/core/", [" a -> b -> c -> a ", "b_count (inline)"])

    def test_without_the_inline_call_passes(self):
        files = dict(INLINE_CALL)
        files["daemon/core/a.c"] = files["daemon/core/a.c"].replace("b_count(n);", "++*n;")
        rc, out = self.run_tree(files)
        self.assertEqual(rc, 0, out)
        self.assertIn("no cycle", out)

    def test_inline_body_cycle_fails(self):
        self.fails(INLINE_BODY, "daemon/core/", [" a -> b -> c -> a ", "c_touch (inline)"])

    def test_comment_is_no_call(self):
        files = dict(INLINE_CALL)
        files["daemon/core/a.c"] = files["daemon/core/a.c"].replace(
            "b_count(n);", "++*n; /* as b_count(n) */")
        rc, out = self.run_tree(files)
        self.assertEqual(rc, 0, out)

    def test_folder_cycle_fails(self):
        self.fails(FOLDERS, "daemon/device/", ["sub/", "x"])

    def test_folder_include_cycle_fails(self):
        files = dict(FOLDERS)
        files["daemon/device/sub/z.c"] = """
            #include "device/x.h"
            int z_fn(int n);
            int z_fn(int n) { return n; }
        """
        self.fails(files, "daemon/device/", ["sub/", "includes"])

    def test_without_the_folder_call_passes(self):
        files = dict(FOLDERS)
        files["daemon/device/sub/z.c"] = """
            int z_fn(int n);
            int z_fn(int n) { return n; }
        """
        rc, out = self.run_tree(files)
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
