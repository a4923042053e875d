#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that devqd's folders are layers whose includes and calls only go down.

    tools/check_layers.py [--root DIR] OBJDIR

DIR is the tree to check (default: the working directory); OBJDIR holds
its objects, daemon/x/y.c built as OBJDIR/daemon/x/y.o.  The layers, lowest first (ARCHITECTURE.md):

    base  <  device  <  core  <  requests  <  server

A file may include headers of its own layer or a lower one, and call
functions defined in its own layer or a lower one.  daemon/core/ is the
engine without transport: no <uv.h> and no socket calls there.  The shared
folders below the daemon (proto/, kernels/) include nothing of daemon/ or
client/: both sides build on them.

No circle, at any scale.  A room is a header and its source together
(core/quota.h and core/quota.c are the room core/quota; a lone .h or .c is
a room of its own).  Room A uses room B when code of A calls a function of
B, whichever way the compiler made the call:

  - a function B's source defines, read from the objects (nm): these are
    also the calls A's object makes through inline functions or macros
    once inlined, so the build must come first;
  - a static inline function B's header defines: inlining leaves no
    symbol for it, so the sources are read for its name (comments and
    strings left out), and its own body for the functions it calls, which
    are then B's uses.

A function-like macro is text its user's file pastes in: what it calls
shows in its user's object, what it reads is the user's business, as any
field of a struct whose header the user includes.  Includes alone make no
use between rooms of one folder: their structs may know each other's
layout (a session holds its tenant, a tenant its fairness lane) without
either calling the other.

In daemon/ and in every folder under it, the things the folder holds (its
rooms, and each subfolder taken whole) must use each other without a
cycle; between a subfolder and anything beside it includes count too.
Headers themselves must not include each other in a cycle.

Exit status 1, with one line per violation, when any is found.
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
# "static inline T name(": a definition when a body follows.  Attributes,
# whose parentheses would hide the name, are blanked first (ATTR_RE).
INLINE_RE = re.compile(r"\bstatic\s+(?:__inline__|inline)\b[^;{}()=]*?\b(\w+)\s*\(")
# A call: a name and "(", not a member's function pointer (be->ops->flush()).
CALL_RE = re.compile(r"(?<!\.)(?<!->)\b([A-Za-z_]\w*)\s*\(")
ATTR_RE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")
# Comments, string and character literals: no call in them.
C_TOKEN_RE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def layer_of(path):
    parts = path.split("/")
    if len(parts) >= 3 and parts[0] == "daemon" and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return None


def sources(dirs):
    out = []
    for d in dirs:
        for root, _, files in os.walk(d):
            out += [os.path.join(root, f) for f in files if f.endswith((".c", ".h"))]
    return sorted(out)


def daemon_files():
    return sources(["daemon"])


def shared_files():
    return sources(SHARED_DIRS)


def room_of(path):
    return os.path.splitext(path)[0]


def code_of(path):
    """path's text without comments, string and character literals, nor
    preprocessor lines: what calls a function is left."""
    def blank(m):  # a comment keeps its lines, so "#" stays at a line's start
        t = m.group(0)
        return " " + "\n" * t.count("\n") if t[0] == "/" else '""'

    text = C_TOKEN_RE.sub(blank, open(path, encoding="utf-8").read())
    return re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)


def resolve(src, name):
    """The repository path an #include "name" of src refers to, or None."""
    for base in [os.path.dirname(src), "daemon"] + SHARED_DIRS:
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    return None


def inline_functions(headers):
    """{name: (header, body)} of each static inline function the headers
    define."""
    out = {}
    for h in headers:
        code = ATTR_RE.sub(" ", code_of(h))
        for m in INLINE_RE.finditer(code):
            i = code.find("{", m.end())
            if i < 0 or code.find(";", m.end(), i) >= 0:
                continue  # a declaration, not a definition
            depth, j = 0, i
            while j < len(code):
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                if depth == 0:
                    break
                j += 1
            out.setdefault(m.group(1), (h, code[i:j + 1]))
    return out


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


def cycle_in(graph, comp):
    """One shortest cycle through comp's first node, within comp."""
    start, inside = comp[0], set(comp)
    prev, todo = {}, collections.deque([start])
    while todo:
        v = todo.popleft()
        for w in sorted(graph.get(v, ())):
            if w not in inside:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w not in prev:
                prev[w] = v
                todo.append(w)
    return comp + [comp[0]]


def folders():
    out = set()
    for f in daemon_files():
        d = os.path.dirname(f)
        while d:
            out.add(d)
            d = os.path.dirname(d)
    return sorted(out)


def folder_view(folder, edges):
    """edges (room -> {room: why}) seen from folder: its rooms as they are,
    each subfolder one node ("name/"); what lies outside left out."""
    def node(path):
        rel = os.path.relpath(path, folder)
        if rel.startswith(".."):
            return None
        head, _, rest = rel.partition("/")
        return head + "/" if rest else head

    view = collections.defaultdict(dict)
    for a, targets in edges.items():
        na = node(a)
        for b, why in targets.items():
            nb = node(b)
            if na and nb and na != nb:
                view[na].setdefault(nb, why)
    return view


def main(argv):
    args = argv[1:]
    root = "."
    if len(args) == 3 and args[0] == "--root":
        root, args = args[1], args[2:]
    if len(args) != 1:
        sys.exit(__doc__)
    objdir = os.path.abspath(args[0])
    os.chdir(root)
    problems = []

    # ---- includes ----
    inc = collections.defaultdict(set)
    room_inc = collections.defaultdict(dict)
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
                room_inc[room_of(f)].setdefault(room_of(target), f"{f} includes {target}")
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
    # Room -> {room it uses: why}, from calls of either kind.
    uses = collections.defaultdict(dict)

    def use(f, name, g, how):
        lf, lg = layer_of(f), layer_of(g)
        if lg is not None and lf is not None and lg > lf:
            problems.append(f"{f}: calls {name}{how} of {g}: {LAYERS[lg]} is above {LAYERS[lf]}")
        if room_of(f) != room_of(g):
            uses[room_of(f)].setdefault(room_of(g), f"{f} calls {name}{how} of {g}")

    for f, syms in undefined.items():
        lf = layer_of(f)
        for s in sorted(syms):
            if lf == LAYERS.index("core") and s in CORE_FORBIDDEN_CALLS:
                problems.append(f"{f}: calls {s}(): daemon/core/ has no transport")
            g = defined.get(s)
            if g and g != f:
                use(f, s, g, "")
    inlines = inline_functions(h for h in daemon_files() + shared_files() if h.endswith(".h"))
    ninline = 0
    for name, (h, body) in sorted(inlines.items()):
        for ident in sorted(set(CALL_RE.findall(body))):
            if ident in inlines and ident != name:
                use(h, ident, inlines[ident][0], " (inline)")
            elif ident in defined:
                use(h, ident, defined[ident], "")
    for f in daemon_files():
        idents = set(CALL_RE.findall(code_of(f)))
        for name in sorted(idents & inlines.keys()):
            h = inlines[name][0]
            if room_of(h) != room_of(f):
                ninline += 1
            use(f, name, h, " (inline)")

    # ---- no circle, in daemon/ and each folder under it ----
    nfolders = 0
    for d in folders():
        nfolders += 1
        view = folder_view(d, uses)
        for a, targets in folder_view(d, room_inc).items():
            for b, why in targets.items():
                if a.endswith("/") or b.endswith("/"):
                    view[a].setdefault(b, why)
        for comp in sccs(view):
            cyc = cycle_in(view, comp)
            hops = "; ".join(view[a][b] for a, b in zip(cyc, cyc[1:]))
            problems.append(f"cycle in {d}/: " + " -> ".join(cyc) + f" ({hops})")

    for p in problems:
        print("check-layers: " + p)
    nfiles = len(daemon_files())
    if problems:
        print(f"check-layers: {len(problems)} violations in {nfiles} files")
        return 1
    print(f"check-layers: {nfiles} files in {len(LAYERS)} layers, "
          f"{sum(len(v) for v in inc.values())} includes and "
          f"{sum(len(v) for v in uses.values())} uses between rooms "
          f"({ninline} calls of inline functions), all going down, "
          f"no cycle in daemon/ nor the {nfolders - 1} folders under it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
