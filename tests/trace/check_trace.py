#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks a `devctl trace` JSON file (and optionally its SVG) against what
the test's clients saw.  Usage: check_trace.py TRACE.json EXPECT.json [TRACE.svg]

EXPECT.json (written by tests/test_trace.c):
  sessions:    {session id: {"pid": P, "uid": U, "name": N}}
  completions: [{session, queue, point, code, client_submit, received, handoff,
                 device_start, device_end, observed, client_received}]
  deps:        [{"from": [s, q, p], "to": [s, q, p], "name": "explicit wait"}]
  releases:    [{"session": s, "buffer": id, "after": [s, q, p]}]
  foreign:     [session ids that must not appear]
  lanes:       number of device streams the ops used (checked in the SVG)
  svg_scale:   (issue 17 item 9) pictures that stay readable at scale:
               {"legend_max": most legend entries, "legend_entries": how
               many, "legend_groups": how many of them group sessions,
               "high_streams": [streams
               marked high priority], "failed": [{"op": [s, q, p], "name":
               executable, "code": code name}], "min_width": px,
               "max_device_rects": bound on device boxes drawn}

Exit status 0 when everything holds; otherwise every problem is printed and
the status is 1."""
import json
import sys
import xml.etree.ElementTree as ET

problems = []


def bad(msg):
    problems.append(msg)


def ns(us):
    """Trace timestamps are microseconds with three exact decimals."""
    return int(round(float(us) * 1000))


def main():
    trace = json.load(open(sys.argv[1]))
    exp = json.load(open(sys.argv[2]))
    events = trace.get("traceEvents")
    if not isinstance(events, list) or not events:
        bad("traceEvents missing or empty")
        return

    # 1. Every event has ph/ts/pid/tid; durations >= 0.
    for i, e in enumerate(events):
        for k in ("ph", "ts", "pid", "tid"):
            if k not in e:
                bad("event %d lacks %s: %r" % (i, k, e))
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0:
            bad("event %d has a bad ts: %r" % (i, e))
        if e.get("ph") == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            bad("event %d: X without a duration >= 0: %r" % (i, e))

    # 2. Async slices open and close in pairs, never ending before they begin.
    open_ = {}
    for e in events:
        if e.get("ph") in ("b", "e"):
            key = (e["pid"], e.get("cat"), e.get("id"), e.get("name"))
            if e["ph"] == "b":
                open_.setdefault(key, []).append(e["ts"])
            else:
                if not open_.get(key):
                    bad("async end without begin: %r" % (e,))
                    continue
                b = open_[key].pop()
                if e["ts"] < b:
                    bad("async slice ends before it begins: %r" % (key,))
    for key, v in open_.items():
        if v:
            bad("async slice never ends: %r" % (key,))

    # Device slices by op.
    dev = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "device":
            a = e.get("args", {})
            dev[(a.get("session"), a.get("queue"), a.get("point"))] = e
    xs = [e for e in events if e.get("ph") == "X"]

    def enclosing(e):
        """The X slice on e's thread that contains e's timestamp."""
        t = ns(e["ts"])
        for x in xs:
            if x["pid"] == e["pid"] and x["tid"] == e["tid"]:
                s = ns(x["ts"])
                if s <= t <= s + ns(x["dur"]):
                    return x
        return None

    # 3. Flow events pair up (one start, one finish per id) and bind to slices.
    flows = {}
    for e in events:
        if e.get("ph") in ("s", "t", "f"):
            flows.setdefault((e.get("cat"), e.get("id")), []).append(e)
    bound = []
    for key, v in flows.items():
        phs = sorted(x["ph"] for x in v)
        if phs != ["f", "s"]:
            bad("flow %r does not pair up: %r" % (key, phs))
            continue
        s = next(x for x in v if x["ph"] == "s")
        f = next(x for x in v if x["ph"] == "f")
        if f.get("bp") != "e":
            bad("flow %r: finish does not bind to its enclosing slice" % (key,))
        if f["ts"] < s["ts"]:
            bad("flow %r goes back in time" % (key,))
        src, dst = enclosing(s), enclosing(f)
        if src is None or dst is None:
            bad("flow %r does not start and end inside slices" % (key,))
            continue
        bound.append((s.get("name"), src, dst))

    # 4. The expected dependency arrows, producer -> consumer.
    for d in exp.get("deps", []):
        p, c = dev.get(tuple(d["from"])), dev.get(tuple(d["to"]))
        if p is None or c is None:
            bad("dependency %r: an op is missing from the trace" % (d,))
            continue
        if not any(n == d["name"] and s is p and t is c for n, s, t in bound):
            bad("no '%s' arrow from %r to %r" % (d["name"], d["from"], d["to"]))
        waits = c["args"].get("waits", [])
        kind = "hazard" if d["name"] == "buffer hazard" else "explicit"
        if not any(w["queue"] == d["from"][1] and w["point"] == d["from"][2] and w["kind"] == kind
                   for w in waits):
            bad("consumer %r does not list its %s wait on %r" % (d["to"], kind, d["from"]))

    # 5. Timestamps agree with the completions the clients received.
    for c in exp.get("completions", []):
        k = (c["session"], c["queue"], c["point"])
        e = dev.get(k)
        if e is None:
            bad("op %r completed but is not in the trace" % (k,))
            continue
        a = e["args"]
        if ns(e["ts"]) != c["device_start"] or ns(e["ts"]) + ns(e["dur"]) != c["device_end"]:
            bad("op %r: device span %s+%s differs from the completion's %d..%d"
                % (k, e["ts"], e["dur"], c["device_start"], c["device_end"]))
        for f in ("client_submit", "received", "handoff", "observed"):
            if ns(a[f + "_us"]) != c[f]:
                bad("op %r: %s %s in the trace, %d in the completion" % (k, f, a[f + "_us"], c[f]))
        if a.get("status") != ("ok" if c["code"] == 0 else a.get("status")):
            bad("op %r: status %s, completion code %d" % (k, a.get("status"), c["code"]))
        if c["client_received"] < c["observed"]:
            bad("op %r: the client received it before the daemon observed it" % (k,))

    # 6. Processes named by client name, pid and uid; nobody else's ops.
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    for sid, s in exp.get("sessions", {}).items():
        n = names.get(int(sid))
        want = "%s (pid %d, uid %d" % (s["name"], s["pid"], s["uid"])
        if n is None or not n.startswith(want):
            bad("session %s: process named %r, want %r..." % (sid, n, want))
    pids = {e["pid"] for e in events}
    for sid in exp.get("foreign", []):
        if sid in pids:
            bad("session %d of another user appears in the trace" % sid)
    for e in events:
        a = e.get("args", {})
        if "session" in a and a["session"] != e["pid"]:
            bad("event of session %r filed under process %r" % (a["session"], e["pid"]))

    # 7. Buffer releases: a release slice, and an arrow from the last consumer.
    for r in exp.get("releases", []):
        last = dev.get(tuple(r["after"]))
        rel = [x for x in xs if x["pid"] == r["session"] and x.get("cat") == "buffer"
               and x.get("args", {}).get("buffer") == r["buffer"]]
        if last is None or len(rel) != 1:
            bad("release of buffer %r: %d release slices" % (r["buffer"], len(rel)))
            continue
        if not any(n == "release" and s is last and t is rel[0] for n, s, t in bound):
            bad("no release arrow from %r to buffer %r's release" % (r["after"], r["buffer"]))
        if ns(rel[0]["ts"]) < ns(last["ts"]) + ns(last["dur"]):
            bad("buffer %r released before its last consumer ended" % r["buffer"])

    # 8. The SVG: well-formed XML, one lane per device stream used.
    if len(sys.argv) > 3:
        try:
            root = ET.parse(sys.argv[3]).getroot()
        except ET.ParseError as err:
            bad("SVG is not well-formed XML: %s" % err)
            return
        if root.tag != "{http://www.w3.org/2000/svg}svg":
            bad("SVG root element is %s" % root.tag)
        lanes = [g.get("data-stream") for g in root.iter("{http://www.w3.org/2000/svg}g")
                 if (g.get("class") or "").split()[:1] == ["lane"]]
        used = {str(e["args"]["stream"]) for e in dev.values()}
        if sorted(lanes) != sorted(used):
            bad("SVG lanes %r, streams used %r" % (sorted(lanes), sorted(used)))
        if "lanes" in exp and len(lanes) != exp["lanes"]:
            bad("SVG has %d lanes, want %d" % (len(lanes), exp["lanes"]))
        ops = [g for g in root.iter("{http://www.w3.org/2000/svg}g")
               if g.get("class") in ("op", "burst")]
        drawn = sum(int(g.get("data-ops", "1")) for g in ops)
        if drawn != len(dev):
            bad("SVG draws %d ops, the trace has %d" % (drawn, len(dev)))
        deps = [l for l in root.iter("{http://www.w3.org/2000/svg}line")
                if (l.get("class") or "").startswith("dep")]
        if len(deps) < len(exp.get("deps", [])):
            bad("SVG draws %d dependency arrows, want at least %d"
                % (len(deps), len(exp.get("deps", []))))
        texts = "".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
        if not any(u in texts for u in (" ns", " µs", " ms", " s")):
            bad("SVG time axis has no units")
        if "svg_scale" in exp:
            check_svg_scale(root, ops, exp["svg_scale"])


SVG = "{http://www.w3.org/2000/svg}"


def check_svg_scale(root, ops, want):
    import re
    # A legend a person can read, with colours that do not repeat.
    legend = [g for g in root.iter(SVG + "g") if g.get("class") == "legend"]
    if len(legend) > want.get("legend_max", 12):
        bad("SVG legend has %d entries, want at most %d" % (len(legend), want["legend_max"]))
    if "legend_entries" in want and len(legend) != want["legend_entries"]:
        bad("SVG legend has %d entries, want %d" % (len(legend), want["legend_entries"]))
    groups = [t.text or "" for g in legend for t in g.iter(SVG + "text")
              if "more sessions" in (t.text or "")]
    if len(groups) != want.get("legend_groups", len(groups)):
        bad("SVG legend groups %r, want %d" % (groups, want["legend_groups"]))
    fills = [r.get("fill") for g in legend for r in g.iter(SVG + "rect")]
    if len(set(fills)) != len(fills):
        bad("SVG legend colours repeat: %r" % fills)
    # The high-priority lanes are marked as such.
    for g in root.iter(SVG + "g"):
        if (g.get("class") or "").split()[:1] == ["lane"]:
            text = "".join(t.text or "" for t in g.iter(SVG + "text"))
            high = int(g.get("data-stream")) in want.get("high_streams", [])
            if high != ("high priority" in text):
                bad("lane of stream %s says %r (high-priority streams: %r)"
                    % (g.get("data-stream"), text, want.get("high_streams")))
    # Short ops are visible and say what they are on hover.
    minw = want.get("min_width", 2)
    rects = [r for r in root.iter(SVG + "rect") if r.get("class") == "device"]
    thin = [r for r in rects if float(r.get("width")) < minw]
    if thin:
        bad("%d device boxes narrower than %g px" % (len(thin), minw))
    dark = [r for r in rects if float(r.get("width")) < 3 and r.get("stroke") not in (None, "none")
            and r.get("stroke") != "#d00000"]
    if dark:
        bad("%d boxes under 3 px have an outline (a burst of them draws as a black smear)"
            % len(dark))
    if len(rects) > want.get("max_device_rects", 1 << 30):
        bad("SVG draws %d device boxes, want at most %d (short ops in a burst merged)"
            % (len(rects), want["max_device_rects"]))
    for g in ops:
        if g.find(SVG + "title") is None:
            bad("op %s.%s.%s has no <title>" % (g.get("data-session"), g.get("data-queue"),
                                                g.get("data-point")))
    # Failed ops named with their executable and their error.
    for f in want.get("failed", []):
        s, q, p = f["op"]
        g = [g for g in ops if g.get("data-session") == str(s) and g.get("data-queue") == str(q)
             and g.get("data-point") == str(p)]
        title = g[0].find(SVG + "title").text if g and g[0].find(SVG + "title") is not None else ""
        if f["name"] not in title or f["code"] not in title or "failed" not in title:
            bad("failed op %r titled %r: want its executable %s and error %s"
                % (f["op"], title, f["name"], f["code"]))
    # Durations in a unit that fits: no "100000.0 µs".
    unfit = [(v, u, t.text) for t in root.iter(SVG + "title")
             for v, u in re.findall(r"(\d+(?:\.\d+)?) (ns|µs|ms)\b", t.text or "")
             if float(v) >= 1000]
    if unfit:
        bad("%d durations not in a fitting unit, e.g. %s %s in %r" % ((len(unfit),) + unfit[-1]))


if __name__ == "__main__":
    try:
        main()
    except Exception as err:  # a malformed file is a failure, not a crash
        bad("%s: %s" % (type(err).__name__, err))
    for p in problems:
        print("check_trace: " + p)
    print("check_trace: %s" % ("ok" if not problems else "%d problems" % len(problems)))
    sys.exit(1 if problems else 0)
