#!/usr/bin/env python3
"""house.py — the shape of src/ (issue #27), checked from the tree and the
object files built from it.

    house.py --root DIR [--nm NM --objects LIST] [--max-lines N]

ROOT holds src/. LIST is the object files compiled from src/ ('|' or ';'
separated, as CMake's $<TARGET_OBJECTS:...> joins them; each object's path
contains /src/<folder>/<file>.<ext>.o, which names its source). Rules:

  calls      no two files of src/ call each other in a loop: the graph of
             "file A calls a function file B defines" (from `nm` on the
             objects: A's undefined symbols that B defines) has no cycle.
  names      no two files of src/ share a name.
  length     no function of src/ (*.c) is longer than N lines (120), from
             its opening brace to its closing one, both in column 0 as the
             project writes functions.
  includes   an #include "..." of src/ stays in its folder or goes down the
             layers (LAYERS below, lowest first); a folder of src/ holding
             C files must be placed there.
  sources    src/capture holds a folder per capture source: no .c file at
             its top.

Prints one line per broken rule instance ("house: <rule>: ...") and exits
1; exits 0 with one line saying what was checked otherwise. Exits 2 on bad
arguments or an unreadable input, naming it.
"""
import argparse
import collections
import os
import re
import subprocess
import sys


def fail_usage(msg):
    print("house: " + msg, file=sys.stderr)
    sys.exit(2)


def source_of(obj):
    """'build/.../src/host/window.c.o' -> 'host/window.c' (None: not src)."""
    m = re.search(r"/src/(.+?)\.o$", obj.replace(os.sep, "/"))
    return m.group(1) if m else None


def symbols(nm, obj):
    """(defined global symbols, undefined symbols) of one object file."""
    try:
        out = subprocess.run([nm, obj], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        fail_usage("cannot read %s with %s (%s): build it first" % (obj, nm, e))
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRCVW" and parts[1].isupper():
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
    return defined, undefined


def call_cycles(nm, objects):
    """The loops of the file call graph, each a sorted list of files."""
    defs, undefs = {}, {}
    for obj in objects:
        src = source_of(obj)
        if src is None or src in defs:   # one file built into two targets
            continue
        defs[src], undefs[src] = symbols(nm, obj)
    owner = collections.defaultdict(set)
    for f, names in defs.items():
        for s in names:
            owner[s].add(f)
    graph = {f: sorted({o for s in undefs[f] for o in owner.get(s, ()) if o != f})
             for f in defs}
    # Tarjan's strongly connected components, iteratively.
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            if i < len(graph[v]):
                work.append((v, i + 1))
                w = graph[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
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
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(out), len(defs)


def same_names(src):
    """{name: [paths]} of file names found more than once under src/."""
    seen = collections.defaultdict(list)
    for d, _, files in os.walk(src):
        for f in files:
            seen[f].append(os.path.relpath(os.path.join(d, f), src))
    return {k: sorted(v) for k, v in seen.items() if len(v) > 1}


# The folders of src/, lowest first: a file may include from its own
# folder and from folders on a lower line, never a higher one. Folders on
# one line do not include each other.
LAYERS = [
    ["common"],                 # what the shim and the core share (libc)
    ["util"],
    ["shim"],
    ["events"],
    ["schedule", "stacks"],
    ["export"],
    ["salvage", "read", "hang"],
    ["policy"],
    ["capture"],
    ["control"],
    ["host"],
    ["cli"],
]
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def upward_includes(src):
    """[(file, included, why)] of the includes that do not go down."""
    level = {f: i for i, line in enumerate(LAYERS) for f in line}
    out = []
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".c", ".h", ".cpp")):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, src)
            here = rel.split(os.sep)[0]
            if os.sep not in rel:
                continue
            if here not in level:
                out.append((rel, "", "its folder %s/ is not placed in house.py's LAYERS" % here))
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for m in INCLUDE.finditer(text):
                target = os.path.normpath(os.path.join(d, m.group(1)))
                trel = os.path.relpath(target, src)
                if trel.startswith(".."):
                    continue            # outside src/ (include/, generated)
                there = trel.split(os.sep)[0]
                if there == here or os.sep not in trel:
                    continue
                if there not in level:
                    out.append((rel, m.group(1), "%s/ is not placed in LAYERS" % there))
                elif level[there] >= level[here]:
                    out.append((rel, m.group(1), "%s/ is not below %s/" % (there, here)))
    return out


def top_sources(src):
    """The .c files at the top of src/capture (a source's belong in its
    folder)."""
    cap = os.path.join(src, "capture")
    if not os.path.isdir(cap):
        return []
    return sorted(f for f in os.listdir(cap) if f.endswith(".c"))


FUNC_START = re.compile(r"^\{")
FUNC_END = re.compile(r"^\}")


def long_functions(src, limit):
    """[(lines, file, first line)] of the functions over `limit` lines."""
    out = []
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".c"):
                continue
            path = os.path.join(d, f)
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    lines = fh.read().split("\n")
            except OSError as e:
                fail_usage("cannot read %s (%s)" % (path, e))
            start = None
            for i, line in enumerate(lines):
                if start is None and FUNC_START.match(line):
                    head = i - 1
                    while head > 0 and "(" not in lines[head]:
                        head -= 1
                    # an initialized table ("= {") is not a function
                    start = None if "=" in lines[i - 1] else (i, head)
                elif start is not None and FUNC_END.match(line):
                    n = i - start[0] + 1
                    if n > limit:
                        out.append((n, os.path.relpath(path, src), start[1] + 1,
                                    lines[start[1]].strip()))
                    start = None
    return sorted(out, key=lambda x: (-x[0], x[1]))


def main():
    ap = argparse.ArgumentParser(description="the shape of src/ (#27)")
    ap.add_argument("--root", required=True)
    ap.add_argument("--nm")
    ap.add_argument("--objects")
    ap.add_argument("--max-lines", type=int, default=120)
    a = ap.parse_args()
    src = os.path.join(a.root, "src")
    if not os.path.isdir(src):
        fail_usage("no src/ folder under --root %s: pass the repository" % a.root)
    bad = []
    checked = []
    if a.objects:
        if not a.nm:
            fail_usage("--objects needs --nm (the nm that reads them)")
        objects = [o for o in re.split(r"[|;]", a.objects) if o]
        cycles, nfiles = call_cycles(a.nm, objects)
        for c in cycles:
            bad.append("calls: these files call each other in a loop: " + " ".join(c))
        checked.append("calls among %d files" % nfiles)
    for name, paths in sorted(same_names(src).items()):
        bad.append("names: %s is the name of %s" % (name, ", ".join(paths)))
    checked.append("file names")
    for n, path, line, head in long_functions(src, a.max_lines):
        bad.append("length: %s:%d: %s is %d lines (at most %d: cut it into named steps)"
                   % (path, line, head, n, a.max_lines))
    checked.append("functions of at most %d lines" % a.max_lines)
    for rel, inc, why in upward_includes(src):
        if inc:
            bad.append('includes: %s: #include "%s" goes up the layers (%s)' % (rel, inc, why))
        else:
            bad.append("includes: %s: %s" % (rel, why))
    checked.append("includes down the layers")
    for f in top_sources(src):
        bad.append("sources: capture/%s is at the top of src/capture: move it into its "
                   "source's folder" % f)
    checked.append("a folder per capture source")
    for b in bad:
        print("house: " + b)
    if bad:
        sys.exit(1)
    print("house: ok (%s)" % ", ".join(checked))


if __name__ == "__main__":
    main()
