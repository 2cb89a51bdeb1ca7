#!/usr/bin/env python3
"""No call loops between source files: for the library's sources (src/), the graph "file A calls an
fa3_ function defined in file B" must have no cycle, so that each file's job sits on top of the ones
it uses (issue 13: config.c <-> kernel_fwd.c and cache.c <-> context.c were such loops). Reads the
text only: a call is `fa3_name(` outside comments and strings, a definition such a name at the start
of a line followed by its parameters and `{`. Calls through function pointers are not seen.
Usage: call_loops.py SRC_DIR"""
import pathlib
import re
import sys


def strip(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)


def main(src):
    files = sorted(p for p in pathlib.Path(src).rglob("*.c"))
    text = {f: strip(f.read_text()) for f in files}
    defined = {}
    for f, t in text.items():
        for m in re.finditer(r"^(?:[A-Za-z_][\w \*]*?[\s\*])?(fa3_\w+)\s*\([^;{]*\)\s*\{", t, re.M):
            defined[m.group(1)] = f
    calls = {f: {} for f in files}
    for f, t in text.items():
        for m in re.finditer(r"\b(fa3_\w+)\s*\(", t):
            g = defined.get(m.group(1))
            if g and g != f:
                calls[f].setdefault(g, m.group(1))
    # cycles: Tarjan's strongly connected components
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in calls[v]:
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
                sccs.append(comp)

    sys.setrecursionlimit(10000)
    for f in files:
        if f not in index:
            visit(f)
    rel = lambda p: str(p.relative_to(src))
    for comp in sccs:
        print("call loop among " + ", ".join(sorted(rel(f) for f in comp)) + ":")
        for a in sorted(comp):
            for b, fn in sorted(calls[a].items()):
                if b in comp:
                    print(f"  {rel(a)} calls {fn} ({rel(b)})")
    edges = sum(len(c) for c in calls.values())
    if sccs:
        print(f"{len(sccs)} call loop(s) among {len(files)} files")
        return 1
    print(f"no call loop: {len(files)} files, {edges} file-to-file call edges")
    return 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1]).resolve()))
