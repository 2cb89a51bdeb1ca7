#!/usr/bin/env python3
"""The last round's cost, measured: non-causal fa3jit launches whose tile count fills a whole
number of rounds of the persistent grid against the sweep's shapes, which leave the last round
about half full (2048 tiles at hd128, 1024 at hd256 over 132 CTAs: 15.5 and 7.8 rounds). Each
shape's time per tile (ms / tiles) is printed; if the idle SMs of the last round are the whole
story, the sweep shape's time per tile is ceil(r)/r times the full-round shape's (r its rounds).
Rounds rotated, median of --rounds. Run on the device: PYTHONPATH=python:bench, the library as
gpu-run.sh sets it (FA3JIT_LIBRARY, LD_LIBRARY_PATH=.gpu)."""
import argparse
import math
import statistics

import torch

import compare
import fa3jit


def shape_fn(b, sq, sk, h, hd, dtype):
    q = torch.randn(b, sq, h, hd, device="cuda", dtype=dtype)
    k = torch.randn(b, sk, h, hd, device="cuda", dtype=dtype)
    v = torch.randn(b, sk, h, hd, device="cuda", dtype=dtype)
    return lambda: fa3jit.flash_attn_func(q, k, v, causal=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sms", type=int, default=torch.cuda.get_device_properties(0).multi_processor_count)
    a = ap.parse_args()
    G = a.sms
    # (label, batch, seqlen_q, seqlen_k, heads, head_dim); tiles = batch·heads·ceil(sq/128)
    shapes = []
    for hd, h in ((128, 16), (256, 8)):
        for sk in (16384, 4096):
            b = 16384 // sk
            shapes.append((f"hd{hd} sweep {sk}", b, sk, sk, h, hd))
            # whole rounds: one head fewer, seqlen_q stretched so that the tiles are a multiple of G
            t = b * (h - 1) * (sk // 128)
            full = (t // G) * G
            sq = full // (b * (h - 1)) * 128
            shapes.append((f"hd{hd} whole {sk}", b, sq, sk, h - 1, hd))
    fns = {s[0]: shape_fn(*s[1:], torch.bfloat16) for s in shapes}
    res = {s[0]: [] for s in shapes}
    for r in range(a.rounds):
        order = shapes[r % len(shapes):] + shapes[:r % len(shapes)]
        for s in order:
            res[s[0]].append(compare.graph_ms(fns[s[0]]))
    for label, b, sq, sk, h, hd in shapes:
        tiles = b * h * math.ceil(sq / 128)
        ms = statistics.median(res[label])
        rounds = tiles / G
        print(f"{label:18s} b{b} sq{sq} sk{sk} h{h}: tiles {tiles} rounds {rounds:.2f} "
              f"ms {ms:.4f} us/tile {1000 * ms / tiles:.4f} ceil/r {math.ceil(rounds) / rounds:.4f}")


if __name__ == "__main__":
    main()
