#!/usr/bin/env python3
"""Counts the instructions of a kernel's main key-block loop in an nvdisasm listing
(`nvdisasm -c -g K.cubin`): the innermost loop closed by a predicated backward branch whose body
holds both HGMMA and MUFU.EX2 (plain backward branches are mbarrier retry stubs). Static counts
of the body = instructions per key block and thread on the path without retries. Used for the
SASS comparison with FA4 (docs/notes.md, session 10).
--kept also walks the body as a key block runs where the warp keeps its rows' maxima (the
common block once a row's max has settled: cond_rescale): the O rescale's branch over its FMULs
taken, and with kept_branch the branch right after the VOTE.ANY too; other predicated branches
(the mbarrier retry paths) not taken. It prints the instructions that path executes.
--unmasked: the same walk with mask_branch's branch over the mask taken.
usage: sass_loop.py LISTING [--body FILE] [--kept] [--unmasked]   (FILE: the loop body, one instruction a line)"""
import collections
import re
import sys

INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"^\s*(\.L_x_\d+):")
TARGET = re.compile(r"\(\s*(\.L_x_\d+)\s*\)")
# (class, opcode prefixes); the first match names an opcode's class
CLASSES = [("HGMMA", ("HGMMA",)), ("MUFU.EX2", ("MUFU.EX2",)), ("MUFU other", ("MUFU",)),
           ("FFMA", ("FFMA",)), ("FADD", ("FADD",)), ("FMUL", ("FMUL",)), ("FMNMX", ("FMNMX",)),
           ("FSEL/FSETP", ("FSEL", "FSETP")), ("F2FP packs", ("F2FP",)),
           ("F2F/I2F/F2I", ("F2F", "I2F", "F2I")), ("SHFL", ("SHFL",)), ("BAR", ("BAR",)),
           ("SYNCS (mbarrier)", ("SYNCS",)), ("WARPGROUP", ("WARPGROUP",)),
           ("VOTE/WARPSYNC", ("VOTE", "WARPSYNC")), ("R2UR", ("R2UR",)), ("UMOV", ("UMOV",)),
           ("other uniform", ("U",)), ("MOV", ("MOV", "IMAD.MOV")),
           ("integer ALU", ("IMAD", "IADD3", "LOP3", "LEA", "SHF", "SEL", "PRMT", "VIADD")),
           ("ISETP/PLOP3", ("ISETP", "PLOP3", "P2R", "R2P")), ("branch", ("BRA", "BSSY", "BSYNC"))]


def parse(path):
    ins, labels, pending = [], {}, []
    for line in open(path):
        m = LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = INS.search(line)
        if m:
            for name in pending:
                labels[name] = len(ins)
            pending = []
            ins.append((int(m.group(1), 16), m.group(2)))
    return ins, labels


def opcode(text):
    words = text.split()
    return words[1] if words[0].startswith("@") else words[0]


def main_loop(ins, labels):
    best = None
    for i, (_, text) in enumerate(ins):
        m = TARGET.search(text)
        if not (opcode(text).startswith("BRA") and text.startswith("@") and m):
            continue
        start = labels.get(m.group(1), i + 1)
        if start > i:
            continue
        ops = [opcode(t) for _, t in ins[start:i + 1]]
        if any(o.startswith("HGMMA") for o in ops) and "MUFU.EX2" in ops:
            if best is None or i - start < best[1] - best[0]:
                best = (start, i)
    if best is None:
        sys.exit("no loop with HGMMA and MUFU.EX2 found")
    return ins[best[0]:best[1] + 1]


def kept_path(ins, labels, body, unmasked=False):
    """Instructions executed on one key block of the loop `body` where the warp keeps its maxima
    (unmasked: a forward branch over 16 or more FSEL, mask_branch's skip of the mask, taken)."""
    first = next(i for i, (a, _) in enumerate(ins) if a == body[0][0])
    last = first + len(body) - 1
    i, n, prev, waited = first, 0, "", False
    while first <= i <= last and n <= len(body):
        text = ins[i][1]
        n += 1
        if i == last:
            return n
        waited |= "DEPBAR.LE gsb0, 0x0" in text
        m = TARGET.search(text)
        if m and opcode(text).startswith("BRA"):
            to = labels[m.group(1)]
            skipped = [opcode(t) for _, t in ins[i + 1:to]] if to > i else []
            if (not text.startswith("@") or "VOTE.ANY" in prev or
                    (waited and sum(o.startswith("FMUL") for o in skipped) >= 16) or
                    (unmasked and to <= last and
                     sum(o.startswith("FSEL") for o in skipped) >= 16)):
                prev, i = text, to
                continue
        prev, i = text, i + 1
    sys.exit("the kept walk left the loop body")


def klass(op):
    for name, prefixes in CLASSES:
        if op.startswith(prefixes):
            return name
    return "other: " + op


if __name__ == "__main__":
    ins, labels = parse(sys.argv[1])
    body = main_loop(ins, labels)
    counts = collections.Counter(klass(opcode(t)) for _, t in body)
    print(f"loop {body[0][0]:#x}-{body[-1][0]:#x}: {len(body)} instructions")
    for name, n in counts.most_common():
        print(f"  {name:24s} {n}")
    if "--kept" in sys.argv:
        print(f"executed on a block that keeps its maxima: {kept_path(ins, labels, body)}")
    if "--unmasked" in sys.argv:
        print("the same, the mask skipped (mask_branch): "
              f"{kept_path(ins, labels, body, unmasked=True)}")
    if "--body" in sys.argv:
        with open(sys.argv[sys.argv.index("--body") + 1], "w") as f:
            f.writelines(f"/*{a:04x}*/ {t}\n" for a, t in body)
