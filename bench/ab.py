#!/usr/bin/env python3
"""A/B timing of kernel variants in one device run: runs `fa3-gen bench --json` for the default
plan and for each FA3JIT_PLAN_DEBUG variant (see src/codegen/plan.c), alternating ROUNDS times so
that clock and thermal drift hit every variant alike, and prints the median TFLOP/s per shape.

usage: bench/ab.py [--fa3-gen build/fa3-gen] [--head-dim 64] [--dtype bf16] [--rounds 3]
                   [--mask both|causal|non-causal]
                   VARIANT...      e.g. early_q_release=0 "arrive_per_warp=0,early_q_release=0"
                                   @layout=bhsd (fa3-gen bench --layout bhsd), wg3=0+@layout=bhsd
                                   gen:.gpu/base/fa3-gen (another build, e.g. the last commit's;
                                   its libfa3jit.so must sit beside it)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def bench(gen, variant, head_dim, dtype, mask="both"):
    """variant: '+'-joined parts; a part '@opt=val' is the fa3-gen bench option --opt val, a part
    'gen:PATH' runs the fa3-gen at PATH with the libfa3jit.so beside it, any other part a
    FA3JIT_PLAN_DEBUG setting (e.g. 'wg3=0+@layout=bhsd')."""
    env = dict(os.environ)
    env.pop("FA3JIT_PLAN_DEBUG", None)
    parts = [x for x in variant.split("+") if x]
    for x in [x for x in parts if x.startswith("gen:")]:
        gen = os.path.abspath(x[4:])  # main() checked that it runs
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
        env["FA3JIT_PLAN_DEBUG"] = ",".join(knobs)
    out = subprocess.run([gen, "bench", "--json", "--" + mask, "--head-dim", str(head_dim),
                          "--dtype", dtype] + args, check=True, capture_output=True, text=True,
                         env=env).stdout.strip()
    recs = json.loads(out) if out.startswith("[") else [json.loads(l) for l in out.splitlines()
                                                          if l.startswith("{")]
    return {(int(r["seqlen"]), bool(r["causal"])): float(r["tflops"]) for r in recs}


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
    for v in a.variants:
        for x in v.split("+"):
            if x.startswith("gen:") and not os.access(x[4:], os.X_OK):
                sys.exit(f"ab.py: variant {v!r}: {x[4:]} is not an executable")
    names = ["default"] + a.variants
    runs = {n: [] for n in names}
    for _ in range(a.rounds):
        for n in names:
            runs[n].append(bench(a.fa3_gen, "" if n == "default" else n, a.head_dim, a.dtype,
                                 a.mask))
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
