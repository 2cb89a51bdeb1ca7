#!/usr/bin/env python3
"""How evenly the persistent CTAs share a masked (causal) launch's tiles, by tile order and by
where the producer takes its next tile from the counter (session 22, plan knob late_claim).

A tile costs its key blocks plus TILE_COST (the prologue and epilogue, in key blocks). The tiles
come in the kernel's masked order (codegen/tile_order.h): sections of SECTION (head, batch) pairs,
inside a section m_block slowest and reversed (longest rows first), pairs fastest. Three ways to
deal them to GRID CTAs:
  static  rounds of GRID tiles, every odd round reversed (the order without a counter);
  early   greedy from the counter, the next tile taken when the current one starts (before
          session 22: a CTA holds its next tile through the whole current one);
  late    greedy, the next tile taken when the current one ends (late_claim=1).
Each prints the mean CTA's work over the busiest CTA's: the fraction of the launch the SMs are
busy, which ncu reads as SM active cycles over elapsed cycles (hd256 causal 8192 on the H100,
session 22: 0.913 with the early claim, 0.974 with the late one; FA4 0.971).

  python3 tools/probes/claim_sim.py --head-dim 256 --seqlen 8192 --section 4
  python3 tools/probes/claim_sim.py --sweep      (the compare sweep's causal rows, runtime's sections)
"""
import argparse
import heapq


def tile_costs(seqlen, block_m, block_n, pairs, section, tile_cost):
    nmb = -(-seqlen // block_m)
    out = []
    for first in range(0, pairs, section):
        in_sec = min(section, pairs - first)
        for m in reversed(range(nmb)):
            rows_end = min((m + 1) * block_m, seqlen)
            out += [-(-rows_end // block_n) + tile_cost] * in_sec
    return out


def static(ts, grid):
    load = [0.0] * grid
    for t, cost in enumerate(ts):
        r, pos = divmod(t, grid)
        load[grid - 1 - pos if r & 1 else pos] += cost
    return max(load)


def greedy(ts, grid, early):
    """Makespan of the counter's order. early: a CTA takes its next tile when it starts one."""
    nxt = 0
    held = {}
    heap = []  # (time the CTA's current tile ends, cta)
    for c in range(min(grid, len(ts))):  # first tile: ctaid
        heap.append((ts[nxt], c))
        nxt += 1
    if early:
        for c in range(len(heap)):
            if nxt < len(ts):
                held[c], nxt = nxt, nxt + 1
    heapq.heapify(heap)
    end = 0.0
    while heap:
        t, c = heapq.heappop(heap)
        end = max(end, t)
        if early:
            if c not in held:
                continue
            cur = held.pop(c)
            if nxt < len(ts):
                held[c], nxt = nxt, nxt + 1
        else:
            if nxt >= len(ts):
                continue
            cur, nxt = nxt, nxt + 1
        heapq.heappush(heap, (t + ts[cur], c))
    return end


def row(seqlen, head_dim, block_m, block_n, section, grid, tile_cost, tokens, width):
    pairs = (tokens // seqlen) * (width // head_dim)
    ts = tile_costs(seqlen, block_m, block_n, pairs, min(section, pairs), tile_cost)
    mean = sum(ts) / grid
    return (f"hd{head_dim} causal {seqlen}: {pairs} pairs, sections of {min(section, pairs)}, "
            f"{len(ts)} tiles: static {mean / static(ts, grid):.3f}  early {mean / greedy(ts, grid, True):.3f}"
            f"  late {mean / greedy(ts, grid, False):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--block-m", type=int, default=0, help="default: 192 at head_dim 64, else 128")
    ap.add_argument("--block-n", type=int, default=0, help="default: 80 at head_dim 256, else 128")
    ap.add_argument("--section", type=int, default=0, help="pairs a section (default: all)")
    ap.add_argument("--grid", type=int, default=132)
    ap.add_argument("--tile-cost", type=float, default=1.5)
    ap.add_argument("--tokens", type=int, default=16384, help="batch x seqlen (the sweep's)")
    ap.add_argument("--width", type=int, default=2048, help="heads x head_dim (the sweep's)")
    ap.add_argument("--sweep", action="store_true")
    a = ap.parse_args()
    if min(a.head_dim, a.seqlen, a.grid, a.tokens, a.width) < 1 or a.block_m < 0 or a.block_n < 0 \
            or a.section < 0 or a.tile_cost < 0:
        ap.error("sizes must be positive (block sizes and section: 0 = default)")
    cases = [(a.seqlen, a.head_dim, a.section)]
    if a.sweep:  # the runtime's L2 sections: 32 MiB of K/V (bf16), whatever the counter rule
        cases = [(s, hd, max(1, (32 << 20) // (s * 2 * hd * 2)))
                 for hd in (64, 128, 256) for s in (2048, 4096, 8192, 16384)]
    for seqlen, hd, section in cases:
        bm = a.block_m or (192 if hd == 64 else 128)
        bn = a.block_n or (80 if hd == 256 else 128)
        print(row(seqlen, hd, bm, bn, section or 1 << 30, a.grid, a.tile_cost, a.tokens, a.width))


if __name__ == "__main__":
    main()
