#!/usr/bin/env python3
"""DRAM reads of a causal forward under the kernel's masked tile order, with L2 as one LRU cache
(a model, not a measurement: it knows neither the L2's two halves, nor its sectors and hashing,
nor misses in flight). Every tile of a pair reads its query block, then its key blocks from the
diagonal down (K, then V half a step later), one step per key block, plus TILE_COST steps; each
CTA runs its tiles round by round (codegen/tile_order.h, dumped by tile_order_dump.c, compiled
here on first use). Assumes block_m == block_n and seqlen_q == seqlen_k (tile m reads m+1 key
blocks). Prints MB read per section size and L2 capacity; Q+K+V once is the floor.

  tools/probes/l2_order_model.py --pairs 512 --m 4 --block-bytes 32768 --sections 33,66,77
      (hd128 causal 512, batch 32 x 16 heads, block 128: a K/V block is 128 x 128 x 2 bytes)
"""
import argparse
import os
import subprocess
import sys
from collections import OrderedDict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TILE_COST = 1.5


def dump_tool():
    exe = "/tmp/fa3jit_tile_order_dump"
    src = os.path.join(ROOT, "tools/probes/tile_order_dump.c")
    hdr = os.path.join(ROOT, "src/codegen/tile_order.h")
    if not os.path.exists(exe) or os.path.getmtime(exe) < max(os.path.getmtime(src),
                                                               os.path.getmtime(hdr)):
        subprocess.run(["cc", "-O2", "-std=c11", "-I" + os.path.join(ROOT, "src"), src, "-o",
                        exe], check=True)
    return exe


def dram_mb(order, caps_mb, block_bytes):
    events = []
    for c, tiles in order.items():
        t = 0.0
        for _, pair, m in sorted(tiles):
            events.append((t, ("q", pair, m)))
            t += 1.0
            for j in range(m, -1, -1):
                events.append((t, ("k", pair, j)))
                events.append((t + 0.5, ("v", pair, j)))
                t += 1.0
            t += TILE_COST - 1.0
            events.append((t, ("o", pair, m)))
    events.sort(key=lambda e: e[0])
    out = []
    for cap_mb in caps_mb:
        cap = int(cap_mb * 2**20 // block_bytes)
        lru, reads = OrderedDict(), 0
        for _, key in events:
            if key in lru:
                lru.move_to_end(key)
                continue
            reads += key[0] != "o"  # O is written, not read
            lru[key] = 1
            if len(lru) > cap:
                lru.popitem(last=False)
        out.append(reads * block_bytes / 1e6)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, required=True, help="batch x num_heads")
    ap.add_argument("--m", type=int, required=True, help="query tiles a pair (seqlen / block_m)")
    ap.add_argument("--grid", type=int, default=132)
    ap.add_argument("--block-bytes", type=int, required=True,
                    help="bytes of one K (or V, Q, O) block: block x head_dim x 2")
    ap.add_argument("--sections", required=True, help="comma-separated section sizes (pairs)")
    ap.add_argument("--caps", default="25,32,50", help="L2 capacities to model, MB")
    a = ap.parse_args()
    exe = dump_tool()
    caps = [float(x) for x in a.caps.split(",")]
    print("section  " + "  ".join(f"L2 {c:g} MB" for c in caps) + "   (MB read from DRAM; Q+K+V "
          f"once: {3 * a.pairs * a.m * a.block_bytes / 1e6:.1f})")
    for s in [int(x) for x in a.sections.split(",")]:
        lines = subprocess.run([exe, str(a.pairs), str(a.m), str(a.grid), str(s)], check=True,
                               capture_output=True, text=True).stdout.split()
        order = {}
        for i in range(0, len(lines), 4):
            r, c, pair, m = map(int, lines[i:i + 4])
            order.setdefault(c, []).append((r, pair, m))
        print(f"{s:7d}  " + "  ".join(f"{v:9.1f}" for v in dram_mb(order, caps, a.block_bytes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
