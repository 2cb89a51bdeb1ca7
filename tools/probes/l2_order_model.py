#!/usr/bin/env python3
"""DRAM reads of a causal forward under the kernel's masked tile order, with L2 as one LRU cache
(a model, not a measurement: it knows neither the L2's two halves, nor its sectors and hashing,
nor misses in flight). Every tile of a pair reads its query block, then its key blocks from the
diagonal down (K, then V half a step later), one step per key block, plus TILE_COST steps; each
CTA runs its tiles round by round (codegen/tile_order.h, dumped by tile_order_dump.c, compiled
here on first use). seqlen_q == seqlen_k. Two ways to give the tile:
  --m M --block-bytes B: block_m == block_n, tile m reads m+1 key blocks of B bytes (Q, O alike);
  --seqlen S --block-m BM --block-n BN --head-dim D [--elem-bytes 2]: tile m reads the key blocks
      under its last row (ceil(min(S, (m+1) BM) / BN)), K/V blocks BN x D, Q/O blocks BM x D,
      the L2 counted in bytes.
Prints MB read per section size and L2 capacity; Q+K+V once is the floor.

  tools/probes/l2_order_model.py --pairs 512 --m 4 --block-bytes 32768 --sections 33,66,77
      (hd128 causal 512, batch 32 x 16 heads, block 128: a K/V block is 128 x 128 x 2 bytes)
  tools/probes/l2_order_model.py --pairs 256 --seqlen 512 --block-m 128 --block-n 80 \
      --head-dim 256 --sections 17,33,44,64      (hd256 causal 512, batch 32 x 8 heads)
  --kv-last: K/V evicted only after every Q/O line (the kernel's knob l2_hint=1)
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


def dram_mb(order, caps_mb, nkb, qo_bytes, kv_bytes, kv_last=False):
    """MB read from DRAM for each L2 capacity in caps_mb: nkb[m] key blocks for tile m, Q and O
    blocks of qo_bytes[m], key block j's K and V of kv_bytes[j] each (the last blocks only their
    rows inside seqlen: TMA reads nothing past the tensor), an LRU cache counted in bytes.
    kv_last (the kernel's l2_hint=1): K/V lines leave only when no Q/O line is left to evict
    (evict_last over normal/evict_first), each class LRU within itself."""
    events = []
    for c, tiles in order.items():
        t = 0.0
        for _, pair, m in sorted(tiles):
            events.append((t, ("q", pair, m)))
            t += 1.0
            for j in range(nkb[m] - 1, -1, -1):
                events.append((t, ("k", pair, j)))
                events.append((t + 0.5, ("v", pair, j)))
                t += 1.0
            t += TILE_COST - 1.0
            events.append((t, ("o", pair, m)))
    events.sort(key=lambda e: e[0])
    def size(key):
        return (qo_bytes if key[0] in "qo" else kv_bytes)[key[2]]

    out = []
    for cap_mb in caps_mb:
        cap = cap_mb * 2**20
        # class 0: Q/O (and K/V without kv_last), class 1: K/V kept (evicted last)
        lru, held, reads = (OrderedDict(), OrderedDict()), 0, 0
        for _, key in events:
            cls = lru[1 if kv_last and key[0] in "kv" else 0]
            if key in cls:
                cls.move_to_end(key)
                continue
            if key[0] != "o":  # O is written, not read
                reads += size(key)
            cls[key] = size(key)
            held += size(key)
            while held > cap:
                held -= (lru[0] or lru[1]).popitem(last=False)[1]
        out.append(reads / 1e6)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, required=True, help="batch x num_heads")
    ap.add_argument("--m", type=int, help="query tiles a pair (seqlen / block_m)")
    ap.add_argument("--grid", type=int, default=132)
    ap.add_argument("--block-bytes", type=int,
                    help="bytes of one K (or V, Q, O) block: block x head_dim x 2")
    ap.add_argument("--seqlen", type=int)
    ap.add_argument("--block-m", type=int)
    ap.add_argument("--block-n", type=int)
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--elem-bytes", type=int, default=2)
    ap.add_argument("--sections", required=True, help="comma-separated section sizes (pairs)")
    ap.add_argument("--caps", default="25,32,50", help="L2 capacities to model, MB")
    ap.add_argument("--kv-last", action="store_true",
                    help="K/V loaded evict_last (knob l2_hint=1): Q/O lines are evicted first")
    a = ap.parse_args()
    if a.seqlen is not None:
        if None in (a.block_m, a.block_n, a.head_dim) or a.m is not None or a.block_bytes:
            ap.error("--seqlen needs --block-m, --block-n and --head-dim, and no --m/--block-bytes")
        m_tiles = -(-a.seqlen // a.block_m)
        nkb = [-(-min(a.seqlen, (m + 1) * a.block_m) // a.block_n) for m in range(m_tiles)]
        row = a.head_dim * a.elem_bytes
        qo_bytes = [min(a.block_m, a.seqlen - m * a.block_m) * row for m in range(m_tiles)]
        kv_bytes = [min(a.block_n, a.seqlen - j * a.block_n) * row for j in range(max(nkb))]
        floor = a.pairs * a.seqlen * a.head_dim * a.elem_bytes * 3 / 1e6
    else:
        if a.m is None or not a.block_bytes:
            ap.error("give --m and --block-bytes, or --seqlen with the block sizes")
        m_tiles, nkb = a.m, [m + 1 for m in range(a.m)]
        qo_bytes = kv_bytes = [a.block_bytes] * a.m
        floor = 3 * a.pairs * a.m * a.block_bytes / 1e6
    exe = dump_tool()
    caps = [float(x) for x in a.caps.split(",")]
    print("section  " + "  ".join(f"L2 {c:g} MB" for c in caps) + "   (MB read from DRAM; Q+K+V "
          f"once: {floor:.1f})")
    for s in [int(x) for x in a.sections.split(",")]:
        lines = subprocess.run([exe, str(a.pairs), str(m_tiles), str(a.grid), str(s)], check=True,
                               capture_output=True, text=True).stdout.split()
        order = {}
        for i in range(0, len(lines), 4):
            r, c, pair, m = map(int, lines[i:i + 4])
            order.setdefault(c, []).append((r, pair, m))
        print(f"{s:7d}  " + "  ".join(f"{v:9.1f}" for v in dram_mb(order, caps, nkb, qo_bytes, kv_bytes,
                                                                   a.kv_last)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
