#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that devqd's folders are layers whose includes and calls only go down.

    tools/check_layers.py OBJDIR

The layers, lowest first (ARCHITECTURE.md):

    base  <  device  <  core  <  requests  <  server

A file may include headers of its own layer or a lower one, and call
functions defined in its own layer or a lower one; nothing in daemon/ may
form a cycle, neither of includes nor of calls between files (a cycle inside
one layer is as tangled as one across layers).  daemon/core/ is the engine
without transport: no <uv.h> and no socket calls there.  Calls are read from
the objects the build made (nm), so the Makefile runs this after building
devqd.  The shared folders below the daemon (proto/, kernels/) include
nothing of daemon/ or client/: both sides build on them.  Exit status 1,
with one line per violation, when any is found.
"""
import collections
import os
import re
import subprocess
import sys

LAYERS = ["base", "device", "core", "requests", "server"]
# Below every layer of the daemon: the wire format and its codecs, the
# kernels, generated code.
SHARED_DIRS = ["proto", "kernels"]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
# A socket in daemon/core/ would make the engine a server again.
CORE_FORBIDDEN_HEADERS = {"uv.h", "sys/socket.h", "sys/un.h", "systemd/sd-daemon.h"}
CORE_FORBIDDEN_CALLS = {"socket", "accept", "accept4", "recvmsg", "sendmsg", "getsockopt",
                        "listen", "bind", "connect"}


def layer_of(path):
    parts = path.split("/")
    if len(parts) >= 3 and parts[0] == "daemon" and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return None


def daemon_files():
    out = []
    for root, _, files in os.walk("daemon"):
        for f in files:
            if f.endswith((".c", ".h")):
                out.append(os.path.join(root, f))
    return sorted(out)


def shared_files():
    out = []
    for d in SHARED_DIRS:
        for root, _, files in os.walk(d):
            out += [os.path.join(root, f) for f in files if f.endswith((".c", ".h"))]
    return sorted(out)


def resolve(src, name):
    """The repository path an #include "name" of src refers to, or None."""
    for base in [os.path.dirname(src), "daemon"] + SHARED_DIRS:
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    return None


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    objdir = sys.argv[1]
    problems = []

    # ---- includes ----
    inc = collections.defaultdict(set)
    for f in daemon_files():
        lf = layer_of(f)
        if lf is None:
            problems.append(f"{f}: outside the layers ({', '.join(LAYERS)})")
            continue
        text = open(f, encoding="utf-8").read()
        for kind, name in INCLUDE_RE.findall(text):
            if kind == "<":
                if lf == LAYERS.index("core") and name in CORE_FORBIDDEN_HEADERS:
                    problems.append(f"{f}: includes <{name}>: daemon/core/ has no transport")
                continue
            target = resolve(f, name)
            if target is None:
                continue  # generated (build/gen) or a system header in quotes
            lt = layer_of(target)
            if target.startswith("daemon/") and lt is None:
                problems.append(f"{f}: includes {target}, which is outside the layers")
            elif lt is not None and lt > lf:
                problems.append(f"{f}: includes {target}: {LAYERS[lt]} is above {LAYERS[lf]}")
            if lt is not None and os.path.normpath(target) != f:
                inc[f].add(target)
    for comp in sccs(inc):
        problems.append("include cycle: " + " -> ".join(comp))
    for f in shared_files():
        text = open(f, encoding="utf-8").read()
        for kind, name in INCLUDE_RE.findall(text):
            if kind == "<":
                continue
            for base in [os.path.dirname(f)] + SHARED_DIRS + ["daemon", "client"]:
                p = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(p):
                    if p.split("/")[0] in ("daemon", "client"):
                        problems.append(f"{f}: includes {p}: {p.split('/')[0]}/ is above "
                                        "the shared folders")
                    break

    # ---- calls, from the objects ----
    objs = {}
    for f in daemon_files():
        if f.endswith(".c"):
            o = os.path.join(objdir, f[:-2] + ".o")
            if os.path.isfile(o):
                objs[f] = o
            else:
                problems.append(f"{f}: no object {o} (build devqd first)")
    defined, undefined = {}, {}
    for f, o in objs.items():
        nm = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        undefined[f] = set()
        for line in nm.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                undefined[f].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBR":
                defined.setdefault(parts[2], f)
    calls = collections.defaultdict(set)
    for f, syms in undefined.items():
        lf = layer_of(f)
        for s in sorted(syms):
            if lf == LAYERS.index("core") and s in CORE_FORBIDDEN_CALLS:
                problems.append(f"{f}: calls {s}(): daemon/core/ has no transport")
            g = defined.get(s)
            if not g or g == f:
                continue
            calls[f].add(g)
            lg = layer_of(g)
            if lg is not None and lf is not None and lg > lf:
                problems.append(f"{f}: calls {s} of {g}: {LAYERS[lg]} is above {LAYERS[lf]}")
    for comp in sccs(calls):
        problems.append("call cycle: " + " -> ".join(comp))

    for p in problems:
        print("check-layers: " + p)
    nfiles = len(daemon_files())
    if problems:
        print(f"check-layers: {len(problems)} violations in {nfiles} files")
        return 1
    print(f"check-layers: {nfiles} files in {len(LAYERS)} layers, "
          f"{sum(len(v) for v in inc.values())} includes and "
          f"{sum(len(v) for v in calls.values())} call edges, all going down, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
