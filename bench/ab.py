#!/usr/bin/env python3
"""A/B timing of kernel variants in one device run: runs `fa3-gen bench --json` for the default
plan and for each FA3JIT_PLAN_DEBUG variant (see src/codegen/knobs.c), ROUNDS times with the order
rotated each round so that clock and thermal drift hit every variant alike, and prints the median
TFLOP/s per shape (ROUNDS a multiple of the number of columns gives each column each place).

usage: bench/ab.py [--fa3-gen build/fa3-gen] [--head-dim 64] [--dtype bf16] [--rounds 3]
                   [--mask both|causal|non-causal]
                   VARIANT...      e.g. early_q_release=0 "arrive_per_warp=0,early_q_release=0"
                                   @layout=bhsd (fa3-gen bench --layout bhsd), wg3=0+@layout=bhsd
                                   gen:.gpu/base/fa3-gen (another build, e.g. the last commit's;
                                   its libfa3jit.so must sit beside it)
"""
import argparse
import os
import statistics
import sys

from compare import fa3_gen_bench


def parse_variant(variant, gen):
    """variant: '+'-joined parts; a part '@opt=val' is the fa3-gen bench option --opt val, a part
    'gen:PATH' runs the fa3-gen at PATH with the libfa3jit.so beside it, any other part a
    FA3JIT_PLAN_DEBUG setting (e.g. 'wg3=0+@layout=bhsd'). Returns (fa3-gen, environment, extra
    bench arguments); exits on a malformed variant."""
    env = dict(os.environ)
    env.pop("FA3JIT_PLAN_DEBUG", None)
    parts = [x for x in variant.split("+") if x]
    for x in [x for x in parts if x.startswith("gen:")]:
        if not os.access(x[4:], os.X_OK):
            sys.exit(f"ab.py: variant {variant!r}: {x[4:]} is not an executable")
        gen = os.path.abspath(x[4:])
        libdir = os.path.dirname(gen)
        env["LD_LIBRARY_PATH"] = libdir + os.pathsep + env.get("LD_LIBRARY_PATH", "")
        env["FA3JIT_LIBRARY"] = os.path.join(libdir, "libfa3jit.so")
    parts = [x for x in parts if not x.startswith("gen:")]
    for x in parts:
        if x.startswith("@") and "=" not in x:
            sys.exit(f"ab.py: variant part {x!r}: write @option=value")
        if not x.startswith("@") and "@" in x:
            sys.exit(f"ab.py: variant part {x!r}: join bench options with '+', not ','")
    knobs = [x for x in parts if not x.startswith("@")]
    args = []
    for x in parts:
        if x.startswith("@"):
            args += ["--" + x[1:].split("=", 1)[0]] + x.split("=", 1)[1:]
    if knobs:
        if not any(x.startswith("gen:") for x in variant.split("+")):  # another build: its knobs
            import compare  # the knob table's names and ranges (src/codegen/knobs.c)
            compare.check_variant(",".join(knobs))
        env["FA3JIT_PLAN_DEBUG"] = ",".join(knobs)
    return gen, env, args


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fa3-gen", default="build/fa3-gen")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mask", choices=["both", "causal", "non-causal"], default="both")
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    if "default" in a.variants or len(set(a.variants)) != len(a.variants):
        sys.exit("ab.py: variants must be distinct and not named 'default' (it always runs)")
    names = ["default"] + a.variants
    parsed = {n: parse_variant("" if n == "default" else n, a.fa3_gen) for n in names}
    runs = {n: [] for n in names}
    for rnd in range(a.rounds):
        # the order rotates each round: the column timed first in a round reads low (clock and
        # power ramp; docs/notes.md), so each variant takes each place in turn
        k = rnd % len(names)
        for n in names[k:] + names[:k]:
            gen, env, args = parsed[n]
            runs[n].append(fa3_gen_bench(gen, ["--" + a.mask, "--head-dim", str(a.head_dim),
                                               "--dtype", a.dtype] + args, env))
    # only the shapes every variant measured (an @seqlen or @causal variant measures fewer)
    shapes = sorted(set.intersection(*(set(r) for n in names for r in runs[n])))
    print(f"{a.dtype} hd{a.head_dim}, median of {a.rounds} rounds, TFLOP/s")
    print("shape".ljust(16) + "".join(n[:28].rjust(30) for n in names))
    for s in shapes:
        vals = [statistics.median(r[s] for r in runs[n]) for n in names]
        print(f"{'causal' if s[1] else 'full'} {s[0]}".ljust(16) + "".join(f"{v:30.1f}" for v in vals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
