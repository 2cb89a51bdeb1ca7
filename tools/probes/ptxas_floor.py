#!/usr/bin/env python3
"""The ptxas time of a kernel that holds only the GEMM skeleton of fa3jit's consumer, against the
ptxas time of the real kernel (issue 17's cold-JIT target: 300 ms for the whole process).

The skeleton, for one warpgroup (.maxntid 128): the peeled first block's QK (qk_steps SS wgmmas
m64n{block_n}k16 into S, wait 0, S = 2^S, P packed to bf16x2), then `bodies` copies of the
overlapped key-block loop body (QK and PV issued as two commit groups, wait 1, 2^S, wait 0,
O *= alpha, P packed; a branch closes the loop), then the last PV (block_n/16 RS wgmmas
m64n{head_dim_v}k16 from the packed P into O) and O stored to global memory. No mask, no row max
or sum, no barriers, no producer, no epilogue: whatever ptxas spends on it is spent on the wgmmas
and the registers they hold, the part no generator change can remove while the kernel keeps one
loop body per block kind.

bodies: 1 for the unmasked kernels, 2 for causal/local (fa3jit's masked copy of the body).
The shapes are the planner's defaults (bf16): hd64 block_n 128, hd128 128, hd256 80.

usage: ptxas_floor.py [--fa3-gen PATH] [--ptxas PATH] [--reps N]
prints, per config: the skeleton's wgmma count and ptxas seconds, the real kernel's (fa3-gen
--emit-ptx) and the ratio of the two; each the best of N runs on this machine."""
import argparse
import os
import subprocess
import tempfile
import time

CONFIGS = [  # (name, fa3-gen args, block_n, head_dim_v, qk_steps, bodies)
    ("hd64", ["--head-dim", "64"], 128, 64, 4, 1),
    ("hd64 causal", ["--head-dim", "64", "--causal"], 128, 64, 4, 2),
    ("hd128", ["--head-dim", "128"], 128, 128, 8, 1),
    ("hd128 causal", ["--head-dim", "128", "--causal"], 128, 128, 8, 2),
    ("hd256", ["--head-dim", "256"], 80, 256, 16, 1),
    ("hd256 causal", ["--head-dim", "256", "--causal"], 80, 256, 16, 2),
]


def regs(prefix, n):
    return "{" + ",".join(f"{prefix}{j}" for j in range(n)) + "}"


def skeleton(block_n, hdv, qk_steps, bodies):
    ns, no, na = block_n // 2, hdv // 2, block_n // 4
    out = [".version 8.8", ".target sm_90a", ".address_size 64",
           ".visible .entry skeleton(.param .u64 out) .maxntid 128, 1, 1 {",
           f".reg .f32 s<{ns}>; .reg .f32 o<{no}>; .reg .b32 a<{na}>;",
           ".reg .b64 dq, dk, dv, d, ptr; .reg .pred p, t, f; .reg .b32 i, n; .reg .f32 al;",
           "mov.u32 i, 0; mov.u32 n, %tid.x; setp.eq.u32 t, n, n; setp.ne.u32 f, n, n;",
           "cvt.rn.f32.u32 al, n;",
           # descriptors: 128B swizzle, SBO 1024 B; start addresses apart
           "mov.b64 dq, 0x4000004000010000; mov.b64 dk, 0x4000004000010400;",
           "mov.b64 dv, 0x4000004000810800;"]
    out += [f"mov.f32 o{j}, 0f00000000;" for j in range(no)]

    def qk():
        out.append("wgmma.fence.sync.aligned;")
        for k in range(qk_steps):
            out.append(f"add.s64 d, dk, {2 * k};")
            out.append(f"wgmma.mma_async.sync.aligned.m64n{block_n}k16.f32.bf16.bf16 "
                       f"{regs('s', ns)}, dq, d, {'t' if k else 'f'}, 1, 1, 0, 0;")
        out.append("wgmma.commit_group.sync.aligned;")

    def pv(fence):
        if fence:
            out.append("wgmma.fence.sync.aligned;")
        for k in range(block_n // 16):
            out.append(f"add.s64 d, dv, {128 * k};")
            out.append(f"wgmma.mma_async.sync.aligned.m64n{hdv}k16.f32.bf16.bf16 {regs('o', no)}, "
                       f"{{a{4 * k},a{4 * k + 1},a{4 * k + 2},a{4 * k + 3}}}, d, 1, 1, 1, 1;")
        out.append("wgmma.commit_group.sync.aligned;")

    def exp2():
        out.extend(f"ex2.approx.ftz.f32 s{j}, s{j};" for j in range(ns))

    def pack():
        out.extend(f"cvt.rn.bf16x2.f32 a{j}, s{2 * j + 1}, s{2 * j};" for j in range(na))

    qk()
    out.append("wgmma.wait_group.sync.aligned 0;")
    exp2()
    pack()
    for b in range(bodies):
        out += [f"LOOP{b}:", f"setp.ge.u32 p, i, n; @p bra LAST{b};"]
        qk()
        pv(False)
        out.append("wgmma.wait_group.sync.aligned 1;")
        exp2()
        out.append("wgmma.wait_group.sync.aligned 0;")
        out.extend(f"mul.f32 o{j}, o{j}, al;" for j in range(no))
        pack()
        out += ["add.u32 i, i, 1;", f"bra.uni LOOP{b};", f"LAST{b}:"]
    pv(True)
    out.append("wgmma.wait_group.sync.aligned 0;")
    out.append("ld.param.u64 ptr, [out];")
    out.extend(f"st.global.f32 [ptr+{4 * j}], o{j};" for j in range(no))
    out.append("ret;\n}")
    return "\n".join(out) + "\n"


def time_ptxas(ptxas, path, reps, workdir):
    best, log = None, ""
    for _ in range(reps):
        t0 = time.monotonic()
        r = subprocess.run([ptxas, "-arch=sm_90a", path, "-o", os.path.join(workdir, "k.cubin")],
                           capture_output=True, text=True)
        t = time.monotonic() - t0
        if r.returncode != 0:
            raise SystemExit(f"ptxas failed on {path}:\n{r.stderr}")
        log = r.stderr
        best = t if best is None else min(best, t)
    return best, log


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fa3-gen", default="build/fa3-gen")
    ap.add_argument("--ptxas", default="/usr/local/cuda/bin/ptxas")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"{'config':14} {'skeleton wgmma':>14} {'skeleton s':>10} {'kernel wgmma':>12} "
          f"{'kernel s':>9} {'kernel/skeleton':>15}")
    with tempfile.TemporaryDirectory() as d:
        for name, args, bn, hdv, qks, bodies in CONFIGS:
            sk = os.path.join(d, "skeleton.ptx")
            text = skeleton(bn, hdv, qks, bodies)
            open(sk, "w").write(text)
            ts, log = time_ptxas(a.ptxas, sk, a.reps, d)
            if "C75" in log:  # a serialized skeleton would not be the kernel's floor
                raise SystemExit(f"the skeleton of {name} drew a ptxas advisory:\n{log}")
            kp = os.path.join(d, "kernel.ptx")
            ptx = subprocess.run([a.fa3_gen, "--emit-ptx"] + args, check=True,
                                 capture_output=True, text=True).stdout
            open(kp, "w").write(ptx)
            tk, _ = time_ptxas(a.ptxas, kp, a.reps, d)
            print(f"{name:14} {text.count('mma_async'):>14} {ts:>10.3f} "
                  f"{ptx.count('wgmma.mma_async'):>12} {tk:>9.3f} {tk / ts:>15.2f}")


if __name__ == "__main__":
    main()
