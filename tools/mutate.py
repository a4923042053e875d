#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Mutation testing of devq's decision code (make mutate).

Generates one-line mutants of the files in FILES, builds each in a copy of
the tree and runs the fast tests that cover its file; a mutant no test
kills (and that tests/mutants-equivalent.txt does not name, with a reason)
is a hole in the suite.

A mutant's identity is FILE:FUNCTION:OP:N, the N-th (from 0) site of OP in
FUNCTION: moving lines, or editing other functions, does not change it.
The operators:

  lt2le le2lt gt2ge ge2gt eq2ne ne2eq   swap a comparison
  lt.rhs+1 lt.rhs-1 (le, gt, ge too)     a relational bound off by one
  and2or or2and                          swap && and ||
  not.drop                               drop a logical !
  +1.drop -1.drop                        drop a "+ 1" / "- 1" on a size
  return0 continue                       return 0 (or return;) / continue
                                         just before an if statement: the
                                         check is skipped, and what follows

Results: killed (a test failed, crashed or ran past the limit), survived,
timeout (counted as killed), nobuild (the mutant did not compile: not a
test's concern) and equivalent (survived, and listed as equivalent).

Workers: each has its own copy of the tree under BUILD/mutate/wN (kept
between runs, synced file by file, so a rerun rebuilds only what changed)
and builds a mutant by rewriting one file there and running make, which
recompiles that one object and relinks the killer tests.
"""
import argparse
import concurrent.futures
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# File -> the test programs that kill its mutants, fastest first: a mutant
# stops at the first test that fails.  Only unit and integration tests that
# do not depend on timing; the soak and bench never count.  (test_perf,
# despite its name, times nothing: it checks the completion page's
# promises, and kills cpage.c's mutants.)
CORE = ["test_core"]
FILES = {
    "daemon/core/validate.c": CORE + ["test_repo_core", "test_daemon", "test_badinput"],
    "daemon/core/buffer.c": CORE + ["test_cring", "test_daemon", "test_badinput", "test_bounds"],
    "daemon/core/timeline.c": CORE + ["test_daemon", "test_badinput"],
    "daemon/core/cpage.c": CORE + ["test_cring", "test_sring", "test_perf", "test_daemon", "test_bounds"],
    # sched.c's completer (devq_sched_on_complete) writes the completion
    # page and ring: test_cring and test_perf check what a client sees.
    "daemon/core/sched.c": CORE + ["test_cring", "test_perf", "test_daemon", "test_badinput",
                                   "test_tenancy", "test_admin"],
    # test_threads: the cores in the fair order (devq_fair_core_pick).
    "daemon/core/fair.c": CORE + ["test_daemon", "test_tenancy", "test_threads"],
    "daemon/core/quota.c": CORE + ["test_daemon", "test_tenancy", "test_bounds", "test_admin"],
    "proto/frame.c": ["test_frame", "test_fuzz_replay", "test_badinput", "test_bounds"],
    "proto/codec/msg_dec.c": ["test_msg_dec", "test_fuzz_replay"],
    "proto/codec/strcheck.c": ["test_msg_dec", "test_badinput"],
    "kernels/sig.c": ["test_kernels", "test_core", "test_badinput", "test_bounds"],
    "daemon/core/cost.c": CORE + ["test_bounds"],
}

# Tests whose failure says something about timing, not behaviour: their
# failures never kill a mutant (Check names the test in each failure line).
TIMING_TESTS = {"test_spin_timing"}

EQUIV_FILE = "tests/mutants-equivalent.txt"

# Where --asan builds a worker's tree with ASan and UBSan.
ASAN_BUILD = "build-asan"

REL = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
SWAP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}


def mask(src):
    """src with comments, string and character literals and preprocessor
    lines blanked (same length, newlines kept), so that positions in the
    mask are positions in src."""
    out = list(src)
    i, n = 0, len(src)
    bol = True  # at the start of a line (only blanks so far)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if bol and c == "#":
            j = i
            while j < n:  # to the end of the line, across backslashes
                if src[j] == "\n" and src[j - 1] != "\\":
                    break
                j += 1
            blank(i, j)
            i = j
            continue
        if c == "\n":
            bol = True
            i += 1
            continue
        if c in " \t":
            i += 1
            continue
        bol = False
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            blank(i + 1, j)  # keep the quotes: "" stays an operand
            i = j + 1
        else:
            i += 1
    return "".join(out)


class Site:
    __slots__ = ("file", "func", "op", "n", "start", "end", "repl", "line")

    @property
    def ident(self):
        return "%s:%s:%s:%d" % (self.file, self.func, self.op, self.n)


ATTR = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")


def functions(m):
    """(name, returns_void, body_start, body_end) of each function
    definition in masked source m."""
    out = []
    depth = 0
    last = 0  # just after the last ; or } at depth 0
    i = 0
    while i < len(m):
        c = m[i]
        if c == "{" and depth == 0:
            # __attribute__((...)) is not the function's name: blank it,
            # keeping offsets, so "static inline __attribute__((x)) int
            # f(...)" is named f and each such function counts its own sites.
            head = ATTR.sub(lambda a: " " * len(a.group(0)), m[last:i])
            fm = re.search(r"(\w+)\s*\(([^;{}]*)\)\s*$", head)
            j = match_brace(m, i)
            if fm and "=" not in head:
                before = head[: fm.start(1)]
                void = re.search(r"\bvoid\b", before) is not None and "*" not in before
                out.append((fm.group(1), void, i + 1, j))
            i = j + 1
            last = i
            continue
        if c == ";" and depth == 0:
            last = i + 1
        i += 1
    return out


def match_brace(m, i):
    d = 0
    for j in range(i, len(m)):
        if m[j] == "{":
            d += 1
        elif m[j] == "}":
            d -= 1
            if d == 0:
                return j
    return len(m) - 1


def rhs_end(m, i, end):
    """End of the right operand of a comparison starting at i."""
    d = 0
    j = i
    while j < end:
        c = m[j]
        if c in "([":
            d += 1
        elif c in ")]":
            if d == 0:
                break
            d -= 1
        elif d == 0 and (c in ";?,:}" or m.startswith("&&", j) or m.startswith("||", j)):
            break
        j += 1
    while j > i and m[j - 1].isspace():
        j -= 1
    return j


def loop_depths(m, start, end):
    """Positions in [start, end) that lie in a loop body's braces."""
    spans = []
    for lm in re.finditer(r"\b(for|while)\s*\(|\bdo\s*\{", m[start:end]):
        k = start + lm.end()
        if lm.group(1):  # skip the condition to its )
            d = 1
            while k < end and d:
                if m[k] == "(":
                    d += 1
                elif m[k] == ")":
                    d -= 1
                k += 1
            while k < end and m[k].isspace():
                k += 1
            if k >= end or m[k] != "{":
                continue
        else:
            k -= 1
        spans.append((k, match_brace(m, k)))
    return spans


def sites_of(path, rel):
    with open(path) as f:
        src = f.read()
    m = mask(src)
    sites = []
    for name, void, bs, be in functions(m):
        counts = {}
        body = []

        def add(op, start, end, repl):
            s = Site()
            s.file, s.func, s.op = rel, name, op
            s.n = counts.get(op, 0)
            counts[op] = s.n + 1
            s.start, s.end, s.repl = start, end, repl
            s.line = src.count("\n", 0, start) + 1
            body.append(s)

        seg = m[bs:be]
        found = []
        for cm in re.finditer(r"(?<![<>=!&|+\-*/%^])(<=|>=|==|!=|<|>)(?![<>=])", seg):
            found.append((bs + cm.start(), "cmp", cm.group(1)))
        for lm in re.finditer(r"&&|\|\|", seg):
            found.append((bs + lm.start(), "log", lm.group(0)))
        for nm in re.finditer(r"!(?!=)", seg):
            found.append((bs + nm.start(), "not", "!"))
        for pm in re.finditer(r"([+-])\s*1\b(?![.\w])", seg):
            k = bs + pm.start() - 1
            while k >= bs and m[k].isspace():
                k -= 1
            # Binary, not a sign: "return -1" and "case -1" are signs, and
            # blanking them left "return ;", which builds (a warning) and
            # returns whatever the register held.
            word = re.search(r"\w+$", m[bs:k + 1]) if k >= bs else None
            if (k >= bs and (m[k].isalnum() or m[k] in "_)]") and
                    not (word and word.group(0) in ("return", "case"))):
                found.append((bs + pm.start(), "one", pm.group(0)))
        loops = loop_depths(m, bs, be)
        for im in re.finditer(r"\bif\s*\(", seg):
            k = bs + im.start() - 1
            while k >= bs and m[k].isspace():
                k -= 1
            if k < bs or m[k] in ";{}:":
                found.append((bs + im.start(), "if", None))
        found.sort()
        for pos, kind, tok in found:
            if kind == "cmp":
                e = pos + len(tok)
                add(REL[tok] + "2" + REL[SWAP[tok]], pos, e, SWAP[tok])
                if tok in ("<", "<=", ">", ">="):
                    r0 = e
                    while r0 < be and m[r0].isspace():
                        r0 += 1
                    r1 = rhs_end(m, r0, be)
                    if r1 > r0:
                        rhs = src[r0:r1]
                        add(REL[tok] + ".rhs+1", r0, r1, "(%s) + 1" % rhs)
                        add(REL[tok] + ".rhs-1", r0, r1, "(%s) - 1" % rhs)
            elif kind == "log":
                add("and2or" if tok == "&&" else "or2and", pos, pos + 2,
                    "||" if tok == "&&" else "&&")
            elif kind == "not":
                add("not.drop", pos, pos + 1, " ")
            elif kind == "one":
                add(tok[0] + "1.drop", pos, pos + len(tok), " " * len(tok))
            elif kind == "if":
                add("return0", pos, pos, "return;" if void else "return 0;")
                if any(a < pos < b for a, b in loops):
                    add("continue", pos, pos, "continue;")
        sites.extend(body)
    return src, sites


def all_sites(files):
    out = {}
    srcs = {}
    for rel in files:
        src, sites = sites_of(os.path.join(ROOT, rel), rel)
        srcs[rel] = src
        for s in sites:
            out[s.ident] = s
    return srcs, out


def read_list(path, need_reason):
    """Identities in a list file: one a line, # comments; with need_reason,
    each must be followed by its reason."""
    out = {}
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip() if not need_reason else line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if need_reason and len(parts) < 2:
                sys.exit("%s:%d: %s has no reason" % (path, ln, parts[0]))
            out[parts[0]] = parts[1] if len(parts) > 1 else ""
    return out


# ---- workers ------------------------------------------------------------

def tree_files():
    r = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                       check=True, stdout=subprocess.PIPE)
    return [p for p in r.stdout.decode().split("\0") if p and os.path.isfile(os.path.join(ROOT, p))]


def sync_tree(dst, files):
    """Copies the files that differ into dst (make sees only those change)."""
    for rel in files:
        s, d = os.path.join(ROOT, rel), os.path.join(dst, rel)
        try:
            with open(s, "rb") as f:
                a = f.read()
            with open(d, "rb") as f:
                if f.read() == a:
                    continue
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copy2(s, d)
        os.utime(d, None)


MAKE = ["make", "-s", "--no-print-directory", "DEVQ_SKIP_DEPCHECK=1", "CUDA=0", "BUILD=build",
        # Mutants are built without -Werror: a mutant that only makes a
        # warning is still a mutant to test.
        "WARN=-Wall -Wextra"]


def run_group(cmd, cwd, env, timeout):
    """(rc, output, timed_out) of cmd in its own process group, killed
    whole at the limit (a test's daemons with it)."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace"), False
    except subprocess.TimeoutExpired:
        kill_session(p.pid)
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # something left holds the pipe
            p.kill()
            out = b""
        return -9, out.decode(errors="replace"), True


def kill_session(sid):
    """SIGKILL to every process of session sid: Check forks each test into
    a process group of its own, so the program's group is not enough; its
    tests and the daemons they started stay in its session."""
    for _ in range(3):
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
            except OSError:
                continue
            fields = st[st.rindex(")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(d))
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


FAIL_LINE = re.compile(r"^[^:\s]+:\d+:[FE]:[^:]*:([^:]+):")


def failed_for_real(rc, out):
    """Whether a Check program's run failed for a reason other than a
    timing test: a failure line of another test, or a failure with no such
    line (a crash, an abort)."""
    if rc == 0:
        return False
    names = [m.group(1) for m in map(FAIL_LINE.match, out.splitlines()) if m]
    if not names:
        return True
    return any(n not in TIMING_TESTS for n in names)


class Worker:
    def __init__(self, k, base, files):
        self.dir = os.path.join(base, "w%d" % k)
        os.makedirs(self.dir, exist_ok=True)
        sync_tree(self.dir, files)
        self.env = dict(os.environ, DEVQ_BUILD="build")
        self.env.pop("MAKEFLAGS", None)
        self.env.pop("MAKELEVEL", None)
        self.dirty = None  # the file rewritten by the last mutant

    def obj(self, rel, build="build"):
        return os.path.join(self.dir, build, "obj", rel[:-2] + ".o")

    def unlink_objs(self, rel):
        # The object of a mutant must not survive into the next build,
        # nor its ASan object (the same second's mtime may not tell).
        for b in ("build", ASAN_BUILD):
            try:
                os.unlink(self.obj(rel, b))
            except FileNotFoundError:
                pass

    def build(self, tests):
        # The integration tests start build/devqd (and some run devctl).
        targets = ["build/devqd", "build/devctl"] + ["build/tests/" + t for t in tests]
        return subprocess.run(MAKE + targets, cwd=self.dir,
                              env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def restore(self, srcs):
        if self.dirty:
            with open(os.path.join(self.dir, self.dirty), "w") as f:
                f.write(srcs[self.dirty])
            self.unlink_objs(self.dirty)
            self.dirty = None

    def run_tests(self, tests, limit, test_limit):
        """'killed', 'survived' or 'timeout', and the killer's name."""
        t0 = time.monotonic()
        for t in tests:
            left = min(limit - (time.monotonic() - t0), test_limit[t])
            if left <= 0:
                return "timeout", t
            rc, out, to = run_group(["build/tests/" + t], self.dir, self.env, left)
            if to:
                return "timeout", t
            if failed_for_real(rc, out):
                return "killed", t
        return "survived", None

    def mutant(self, s, srcs, limit, test_limit):
        if self.dirty and self.dirty != s.file:
            self.restore(srcs)
        src = srcs[s.file]
        with open(os.path.join(self.dir, s.file), "w") as f:
            f.write(src[: s.start] + s.repl + src[s.end:])
        self.dirty = s.file
        self.unlink_objs(s.file)
        tests = FILES[s.file]
        b = self.build(tests)
        if b.returncode != 0:
            return "nobuild", None
        return self.run_tests(tests, limit, test_limit)

    def asan(self, s, test_limit):
        """The mutant in place (after mutant() left it surviving), built with
        ASan and UBSan (SAN=1, as make check-asan) and its killers run
        again: 'killed' and the killer when a test fails there, for
        instance on a read one past an array, which a plain build cannot
        see.  A test past five times its plain limit is not counted as a
        kill here: sanitizers are slow, and the plain run did not hang."""
        tests = FILES[s.file]
        targets = [ASAN_BUILD + "/devqd", ASAN_BUILD + "/devctl"] + \
            [ASAN_BUILD + "/tests/" + t for t in tests]
        make = [a for a in MAKE if not a.startswith("BUILD=")] + ["BUILD=" + ASAN_BUILD, "SAN=1"]
        b = subprocess.run(make + targets, cwd=self.dir, env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if b.returncode != 0:
            return "survived", None
        env = dict(self.env, DEVQ_BUILD=ASAN_BUILD, DEVQ_SANITIZER="1")
        for t in tests:
            rc, out, to = run_group([ASAN_BUILD + "/tests/" + t], self.dir, env, 5 * test_limit[t])
            if not to and failed_for_real(rc, out):
                return "killed", t + " (asan)"
        return "survived", None


def main():
    ap = argparse.ArgumentParser(description="mutation testing of devq's decision code")
    ap.add_argument("--files", nargs="*", help="files to mutate (default: all of FILES)")
    ap.add_argument("--only", action="append", default=[],
                    help="only these identities (repeatable; @FILE reads a list); a prefix "
                         "ending in : selects a file's or a function's")
    ap.add_argument("--sample", type=int, help="a random sample of N mutants")
    ap.add_argument("--seed", type=int, default=1, help="the sample's seed")
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1, help="parallel workers")
    ap.add_argument("--timeout", type=float,
                    help="per-mutant limit in seconds (default: the sum of each killer test's "
                         "limit, three times its unmutated run time + 10 s)")
    ap.add_argument("--build", default="build", help="build folder for the workers' trees")
    ap.add_argument("--survivors", help="write the surviving identities here")
    ap.add_argument("--results", help="write each mutant's identity, result and killer here, "
                    "one line as each ends")
    ap.add_argument("--first-test", action="store_true",
                    help="run only the first (fastest) killer test of each file: a quick pass "
                         "that shows which mutants it alone kills (to choose a CI list)")
    ap.add_argument("--asan", action="store_true",
                    help="build each survivor again with ASan and UBSan and rerun its killers: "
                         "a memory error (one past an array) kills it")
    args = ap.parse_args()

    if args.first_test:
        for f in FILES:
            FILES[f] = FILES[f][:1]
    files = args.files or sorted(FILES)
    for f in files:
        if f not in FILES:
            sys.exit("mutate: %s is not a file mutate knows (FILES in tools/mutate.py)" % f)
    srcs, sites = all_sites(files)
    equiv = read_list(os.path.join(ROOT, EQUIV_FILE), True)

    chosen = list(sites.values())
    if args.only:
        want = []
        for o in args.only:
            if o.startswith("@"):
                want.extend(read_list(o[1:], False))
            else:
                want.append(o)
        exact = {w for w in want if not w.endswith(":")}
        missing = sorted(exact - set(sites))
        if missing:
            sys.exit("mutate: no such mutant (was its function edited?):\n  " + "\n  ".join(missing))
        prefixes = tuple(w for w in want if w.endswith(":"))
        chosen = [s for s in chosen if s.ident in exact or (prefixes and s.ident.startswith(prefixes))]
    if args.sample is not None and args.sample < len(chosen):
        chosen = random.Random(args.seed).sample(chosen, args.sample)
    chosen.sort(key=lambda s: (s.file, s.start, s.op))

    if args.list:
        for s in chosen:
            print("%s\t%s:%d\t%s" % (s.ident, s.file, s.line, " ".join(s.repl.split()) or "(deleted)"))
        print("%d mutants" % len(chosen), file=sys.stderr)
        return 0
    stale = sorted(e for e in equiv if e.split(":", 1)[0] in files and e not in sites)
    if stale:
        print("mutate: %s names mutants that no longer exist:\n  %s" % (EQUIV_FILE, "\n  ".join(stale)),
              file=sys.stderr)
    if not chosen:
        print("mutate: no mutants selected")
        return 0

    t_start = time.monotonic()
    base = os.path.join(ROOT, args.build, "mutate")
    tfiles = tree_files()
    nw = max(1, min(args.j, len(chosen)))
    print("mutate: %d mutants of %d files, %d workers in %s" %
          (len(chosen), len({s.file for s in chosen}), nw, base), flush=True)
    workers = [Worker(k, base, tfiles) for k in range(nw)]
    need = sorted({t for s in chosen for t in FILES[s.file]})

    # The unmutated tree: it must build and pass, and its run time sets
    # the per-mutant limit.
    def prepare(w):
        for f in srcs:  # a previous run's mutant may be left in place
            w.dirty = f
            w.restore(srcs)
        b = w.build(need)
        if b.returncode != 0:
            sys.stdout.write(b.stdout.decode(errors="replace"))
            raise SystemExit("mutate: the unmutated tree does not build")
    with concurrent.futures.ThreadPoolExecutor(nw) as ex:
        list(ex.map(prepare, workers))
    base_time = {}
    for t in need:
        t0 = time.monotonic()
        rc, out, _ = run_group(["build/tests/" + t], workers[0].dir, workers[0].env, 600)
        base_time[t] = time.monotonic() - t0
        if failed_for_real(rc, out):
            sys.stdout.write(out)
            sys.exit("mutate: %s fails on the unmutated tree" % t)

    # A test program that runs past three times its unmutated time (plus a
    # margin for a loaded machine) is hung: the mutant is killed.
    test_limit = {t: 3 * base_time[t] + 10 for t in need}

    def limit_of(s):
        if args.timeout:
            return args.timeout
        return sum(test_limit[t] for t in FILES[s.file])

    results = {}
    lock = threading.Lock()
    resf = open(args.results, "w") if args.results else None
    todo = list(chosen)
    done = [0]

    def work(w):
        while True:
            with lock:
                if not todo:
                    break
                s = todo.pop(0)
            r, killer = w.mutant(s, srcs, limit_of(s), test_limit)
            if r == "survived" and args.asan:
                r, killer = w.asan(s, test_limit)
            if r == "survived" and s.ident in equiv:
                r = "equivalent"
            with lock:
                results[s.ident] = (r, killer)
                if resf:
                    resf.write("%s\t%s\t%s\n" % (s.ident, r, killer or "-"))
                    resf.flush()
                done[0] += 1
                if r == "survived":
                    print("SURVIVED %s  (%s:%d: %s)" % (s.ident, s.file, s.line,
                                                        " ".join(s.repl.split()) or "deleted"),
                          flush=True)
                elif done[0] % 25 == 0:
                    print("  %d/%d done, %.0f s" % (done[0], len(chosen), time.monotonic() - t_start),
                          flush=True)
        w.restore(srcs)

    with concurrent.futures.ThreadPoolExecutor(nw) as ex:
        list(ex.map(work, workers))

    kinds = ["killed", "timeout", "survived", "equivalent", "nobuild"]
    print("\n%-26s %7s %7s %8s %10s %7s %6s" % ("file", "killed", "timeout", "survived",
                                               "equivalent", "nobuild", "total"))
    tot = {k: 0 for k in kinds}
    for f in sorted({s.file for s in chosen}):
        c = {k: 0 for k in kinds}
        for s in chosen:
            if s.file == f:
                c[results[s.ident][0]] += 1
        for k in kinds:
            tot[k] += c[k]
        print("%-26s %7d %7d %8d %10d %7d %6d" % (f, c["killed"], c["timeout"], c["survived"],
                                                  c["equivalent"], c["nobuild"], sum(c.values())))
    print("%-26s %7d %7d %8d %10d %7d %6d" % ("all", tot["killed"], tot["timeout"], tot["survived"],
                                              tot["equivalent"], tot["nobuild"], sum(tot.values())))
    surv = sorted(i for i, (r, _) in results.items() if r == "survived")
    if args.survivors:
        with open(args.survivors, "w") as f:
            f.write("".join(i + "\n" for i in surv))
    print("mutate: %d mutants in %.0f s with %d workers; %d survived" %
          (len(chosen), time.monotonic() - t_start, nw, len(surv)))
    return 1 if surv else 0


if __name__ == "__main__":
    sys.exit(main())
