"""A one-warp (32 lanes) interpreter of fa3jit's consumer softmax PTX.

Segments of the generated kernel (init at the tile start, the peeled block's softmax, the loop
body's softmax/rescale/pack, masked or not, the epilogue's l reduction) are run on a register
file that persists across them. S is injected at the softmax start (after softcap/mask, which the
change does not touch); the PV is modeled between blocks from the P fragments (a registers).
wgmma/mbarrier/bar are no-ops. ex2.approx is modeled as float32(2**x) with ftz.
"""
import re
import numpy as np

L = 32
F32 = np.float32


def f2b(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def b2f(x):
    return np.asarray(x, dtype=np.uint32).view(np.float32)


def ftz(x):
    x = np.asarray(x, dtype=np.float32).copy()
    sub = (x != 0) & (np.abs(x) < np.float32(1.1754944e-38))
    x[sub] = np.copysign(np.float32(0), x[sub])
    return x


def fma32(a, b, c):
    """Correctly rounded float32 fma (round-to-odd in float64, then to float32)."""
    with np.errstate(all="ignore"):
        a64, b64, c64 = (np.asarray(v, np.float32).astype(np.float64) for v in (a, b, c))
        p = a64 * b64
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        ok = np.isfinite(s) & np.isfinite(err) & (err != 0)
        sb = s.view(np.uint64)
        even = (sb & np.uint64(1)) == 0
        adj = ok & even
        if adj.any():
            s = s.copy()
            s[adj] = np.nextafter(s[adj], s[adj] + np.sign(err[adj]) * np.inf)
        return s.astype(np.float32)


def mul_rp(a, b):
    with np.errstate(all="ignore"):
        x = np.asarray(a, np.float32).astype(np.float64) * np.asarray(b, np.float32).astype(np.float64)
        f = x.astype(np.float32)
        lo = f.astype(np.float64) < x
        f = f.copy()
        f[lo] = np.nextafter(f[lo], np.float32(np.inf))
        return f


def ex2_approx_ftz(x):
    with np.errstate(all="ignore"):
        x = ftz(x)
        return ftz(np.exp2(x.astype(np.float64)).astype(np.float32))


def lg2_approx(x):
    with np.errstate(all="ignore"):
        return np.log2(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


def to_bf16(x):
    """cvt.rn.bf16.f32 (RNE, NaN -> 0x7FFF)."""
    b = f2b(x).astype(np.uint64)
    nan = np.isnan(np.asarray(x, np.float32))
    r = ((b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)) & np.uint64(0xFFFF)
    r = r.astype(np.uint32)
    r[nan] = 0x7FFF
    return r


def from_bf16(h):
    return b2f((np.asarray(h, np.uint32) & 0xFFFF) << 16)


def to_f16(x):
    with np.errstate(all="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)


def from_f16(h):
    return (np.asarray(h, np.uint32) & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)


def fmax(a, b, nan_prop=False):
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    with np.errstate(all="ignore"):
        if nan_prop:
            r = np.maximum(a, b)  # propagates NaN
        else:
            r = np.fmax(a, b)
        # +0 over -0
        z = (a == 0) & (b == 0)
        r = np.where(z, np.where(np.signbit(a) & np.signbit(b), np.float32(-0.0), np.float32(0.0)), r)
        return r.astype(np.float32)


def int_op(base, parts, typ, a, b, c=None):
    """An integer instruction of type typ (u32/s32/b32 or the 64-bit ones) on operand bits a, b,
    c (uint64 arrays; c: mad's addend): the result's bits as uint64 (tools/ctasim uses it too)."""
    wide = typ in ("u64", "s64", "b64")
    M = np.uint64(0xFFFFFFFFFFFFFFFF) if wide else np.uint64(0xFFFFFFFF)
    signed = typ.startswith("s")
    if signed:
        sa = a.view(np.int64) if wide else a.astype(np.uint32).view(np.int32).astype(np.int64)
        sb = None if b is None else (b.view(np.int64) if wide
                                     else b.astype(np.uint32).view(np.int32).astype(np.int64))
    with np.errstate(all="ignore"):
        if base == "add":
            return (a + b) & M
        if base == "sub":
            return (a - b) & M
        if base == "mul" and parts[1] == "hi" and not wide and not signed:
            return (a * b) >> np.uint64(32)  # two u32 values: the product fits in 64 bits
        if base in ("mul", "mad"):
            assert parts[1] == "lo", parts
            return (a * b + (c if base == "mad" else np.uint64(0))) & M
        if base == "shl":
            return (a << (b & np.uint64(63))) & M
        if base == "shr":
            return (sa >> sb).astype(np.int64).view(np.uint64) & M if signed else a >> b
        if base == "and":
            return a & b
        if base == "or":
            return a | b
        if base == "xor":
            return a ^ b
        if base == "div":  # C's truncation; x / 0 gives all ones (unsigned)
            if signed:
                q = np.where(sb != 0, np.abs(sa) // np.maximum(np.abs(sb), 1), 0) * np.sign(sa) * np.sign(sb)
                return q.astype(np.int64).view(np.uint64) & M
            return np.where(b != 0, a // np.maximum(b, np.uint64(1)), M)
        if base == "rem":  # the dividend's sign
            if signed:
                q = np.where(sb != 0, np.abs(sa) % np.maximum(np.abs(sb), 1), 0) * np.sign(sa)
                return q.astype(np.int64).view(np.uint64) & M
            return np.where(b != 0, a % np.maximum(b, np.uint64(1)), a)
        if base in ("min", "max"):
            fn = np.minimum if base == "min" else np.maximum
            return fn(sa, sb).astype(np.int64).view(np.uint64) & M if signed else fn(a, b)
    raise NotImplementedError(".".join(parts))


class Segment:
    def __init__(self, lines, name):
        self.name = name
        self.ins = []
        self.labels = {}
        for ln in lines:
            ln = ln.strip()
            if not ln or ln.startswith("//"):
                continue
            if ln.endswith(":"):
                self.labels[ln[:-1]] = len(self.ins)
                continue
            self.ins.append(ln.rstrip(";").strip())


SKIP_PREFIX = ("wgmma.", "mbarrier.", "bar.", "setmaxnreg", "cp.", "fence", "st.", "ld.", "membar")


class Warp:
    def __init__(self, params):
        self.r = {}
        self.params = params  # name -> float (e.g. scale_log2)
        self.skipped = set()
        self.lane = np.arange(L, dtype=np.uint32)

    # --- operands
    def val(self, t):
        t = t.strip()
        neg = False
        if t.startswith("!"):
            neg = True
            t = t[1:]
        if t.startswith("%"):
            if t not in self.r:
                v = np.zeros(L, np.uint32)
            else:
                v = self.r[t]
        elif t.startswith("0f") or t.startswith("0F"):
            v = np.full(L, int(t[2:], 16), np.uint32)
        elif t.startswith("0x") or t.startswith("0X"):
            v = np.full(L, int(t, 16) & 0xFFFFFFFF, np.uint32)
        else:
            v = np.full(L, int(t) & 0xFFFFFFFF, np.uint32)
        if neg:
            v = ~v.astype(bool)
        return v

    def f(self, t):
        return b2f(self.val(t))

    def p(self, t):
        return np.asarray(self.val(t)).astype(bool)

    def set(self, d, v, mask):
        v = np.asarray(v)
        if v.dtype == np.float32:
            v = f2b(v)
        if v.dtype == bool:
            nv = v.copy()
        else:
            nv = v.astype(np.uint32)
        if mask is None or mask.all():
            self.r[d] = nv
        else:
            old = self.r.get(d, np.zeros(L, nv.dtype))
            self.r[d] = np.where(mask, nv, old.astype(nv.dtype))

    def run(self, seg, trace=None):
        pc = 0
        n = len(seg.ins)
        steps = 0
        while pc < n:
            steps += 1
            assert steps < 100000
            ins = seg.ins[pc]
            pc += 1
            pred = None
            m = re.match(r"@(!?%[\w]+)\s+(.*)", ins)
            if m:
                pred = self.p(m.group(1))
                ins = m.group(2)
            op, _, rest = ins.partition(" ")
            ops = [o.strip() for o in rest.split(",")] if rest else []
            if op.startswith("bra"):
                tgt = ops[0]
                if pred is None:
                    take = True
                else:
                    if op == "bra.uni":
                        assert pred.all() or (~pred).all(), (seg.name, ins, pred)
                    if not (pred.all() or (~pred).all()):
                        raise RuntimeError("divergent branch " + ins)
                    take = bool(pred[0])
                if take:
                    if tgt not in seg.labels:
                        return tgt  # left the segment
                    pc = seg.labels[tgt]
                continue
            if op.startswith(SKIP_PREFIX):
                continue
            if "{" in rest:
                self.skipped.add(op)
                continue
            self.exec(op, ops, pred)
        return None

    def exec(self, op, o, mask):
        parts = op.split(".")
        base = parts[0]
        typ = parts[-1]
        isf = typ == "f32"
        with np.errstate(all="ignore"):
            if base == "mov":
                if typ in ("f32", "b32", "u32", "s32"):
                    self.set(o[0], self.val(o[1]).copy(), mask)
                else:
                    self.skipped.add(op)
                return
            if base == "selp":
                pv = self.p(o[3])
                self.set(o[0], np.where(pv, self.val(o[1]), self.val(o[2])).astype(np.uint32), mask)
                return
            if base == "setp":
                cmp = parts[1]
                comb = parts[2] if len(parts) == 4 else None
                if isf:
                    a, b = self.f(o[1]), self.f(o[2])
                    unord = np.isnan(a) | np.isnan(b)
                    c = cmp.rstrip("u") if cmp not in ("nan", "num") else cmp
                    r = {"eq": a == b, "ne": a != b, "gt": a > b, "ge": a >= b, "lt": a < b,
                         "le": a <= b}[c]
                    if cmp.endswith("u") and cmp not in ("nan",):
                        r = r | unord
                    elif cmp == "ne":
                        r = r & ~unord
                else:
                    a, b = self.val(o[1]), self.val(o[2])
                    if typ.startswith("s"):
                        a, b = a.astype(np.int32), b.astype(np.int32)
                    r = {"eq": a == b, "ne": a != b, "gt": a > b, "ge": a >= b, "lt": a < b,
                         "le": a <= b, "hi": a > b, "hs": a >= b, "lo": a < b, "ls": a <= b}[cmp]
                if comb == "and":
                    r = r & self.p(o[3])
                elif comb == "or":
                    r = r | self.p(o[3])
                elif comb is not None:
                    raise NotImplementedError(op)
                self.set(o[0], r, mask)
                return
            if typ == "pred":
                if base == "vote":
                    v = self.p(o[1])
                    assert parts[2] == "any"
                    self.set(o[0], np.full(L, v.any()), mask)
                    return
                if base in ("or", "and", "xor"):
                    a, b = self.p(o[1]), self.p(o[2])
                    r = a | b if base == "or" else a & b if base == "and" else a ^ b
                    self.set(o[0], r, mask)
                    return
                if base == "not":
                    self.set(o[0], ~self.p(o[1]), mask)
                    return
            if base == "shfl":
                assert parts[2] == "bfly"
                a = self.val(o[1])
                k = int(o[2])
                self.set(o[0], a[self.lane ^ k], mask)
                return
            if isf and base in ("add", "sub", "mul", "max", "min", "abs", "neg", "fma", "ex2", "lg2", "rcp", "div"):
                if base == "add":
                    r = self.f(o[1]) + self.f(o[2])
                elif base == "sub":
                    r = self.f(o[1]) - self.f(o[2])
                elif base == "mul":
                    if "rp" in parts:
                        r = mul_rp(self.f(o[1]), self.f(o[2]))
                    else:
                        assert "rm" not in parts and "rz" not in parts
                        r = self.f(o[1]) * self.f(o[2])
                elif base == "max":
                    r = fmax(self.f(o[1]), self.f(o[2]), nan_prop="NaN" in parts)
                elif base == "min":
                    r = np.fmin(self.f(o[1]), self.f(o[2]))
                elif base == "abs":
                    r = np.abs(self.f(o[1]))
                elif base == "neg":
                    r = -self.f(o[1])
                elif base == "fma":
                    r = fma32(self.f(o[1]), self.f(o[2]), self.f(o[3]))
                elif base == "ex2":
                    r = ex2_approx_ftz(self.f(o[1]))
                elif base == "lg2":
                    r = lg2_approx(self.f(o[1]))
                elif base == "rcp":
                    r = np.float32(1) / self.f(o[1])
                else:
                    raise NotImplementedError(op)
                r = np.asarray(r, np.float32)
                if "ftz" in parts and base != "ex2":
                    r = ftz(r)
                self.set(o[0], r, mask)
                return
            if base == "cvt":
                if op in ("cvt.rn.bf16x2.f32", "cvt.rn.f16x2.f32"):
                    conv = to_bf16 if "bf16" in op else to_f16
                    hi, lo = conv(self.f(o[1])), conv(self.f(o[2]))
                    self.set(o[0], (hi << 16) | lo, mask)
                    return
                if op == "cvt.rn.bf16.f32":
                    self.set(o[0], to_bf16(self.f(o[1])), mask)
                    return
                if op == "cvt.rn.f16.f32":
                    self.set(o[0], to_f16(self.f(o[1])), mask)
                    return
                if op == "cvt.f32.bf16":
                    self.set(o[0], from_bf16(self.val(o[1])), mask)
                    return
                if op == "cvt.f32.f16":
                    self.set(o[0], from_f16(self.val(o[1])), mask)
                    return
                self.skipped.add(op)
                return
            # integer ops (bits)
            if typ in ("b32", "u32", "s32") and base in ("add", "sub", "shl", "shr", "and", "or", "xor", "mul", "mad", "rem", "min", "max"):
                g = lambda t: self.val(t).astype(np.uint64)
                r = int_op(base, parts, typ, g(o[1]), g(o[2]) if len(o) > 2 else None,
                           g(o[3]) if base == "mad" else None)
                self.set(o[0], np.asarray(r).astype(np.uint32), mask)
                return
            self.skipped.add(op)


# ------------------------------------------------------------------ the kernel's segments

def segments(ptx_text):
    lines = ptx_text.splitlines()
    idx = {}
    # init: the tile start's movs, from "mov.f32 %o0, 0f00000000" to the first non-mov.f32
    i0 = next(i for i, l in enumerate(lines) if re.match(r"\s*mov\.f32 %o0, 0f00000000;", l))
    i1 = i0
    while re.match(r"\s*mov\.f32 ", lines[i1]):
        i1 += 1
    segs = {"init": Segment(lines[i0:i1], "init")}
    c2 = [i for i, l in enumerate(lines) if re.match(r"\s*and\.b32 %c2_\d+, ", l)]
    loop_lab = next(i for i, l in enumerate(lines) if re.match(r"\$Lcons_loop_\d+:", l))
    segs["peeled"] = Segment(lines[c2[0]:loop_lab], "peeled")
    # bodies: the unmasked one first (if any), then the masked one
    bodies = []
    for c in c2[1:]:
        e = next(i for i in range(c, len(lines)) if re.match(r"\s*bra\.uni \$Lcons_loop_\d+;", lines[i]))
        bodies.append(Segment(lines[c:e], "body"))
    # which body is masked: the one after the $Lcons_masked label
    ml = [i for i, l in enumerate(lines) if re.match(r"\$Lcons_masked_\d+:", l)]
    segs["bodies"] = []
    for c, b in zip(c2[1:], bodies):
        masked = bool(ml) and c > ml[0]
        b.name = "masked" if masked else "unmasked"
        segs["bodies"].append(b)
    ep = next(i for i, l in enumerate(lines) if re.match(r"\$Lepilogue_\d+:", l))
    last_linv = max(i for i in range(ep, min(ep + 80, len(lines))) if re.match(r"\s*selp\.f32 %linv", lines[i]))
    segs["epi"] = Segment(lines[ep + 1:last_linv + 1], "epi")
    # register names
    txt = ptx_text
    def names(pfx):
        return sorted(set(re.findall(r"%" + pfx + r"_\d+\b", txt)), key=lambda s: int(s.split("_")[-1]))
    segs["reg"] = {k: names(k) for k in ("m", "l", "e", "llse", "alpha", "cr", "noff", "linv",
                                          "scale_log2", "rescale", "ownmax", "lse_mul")}
    return segs


def acc_row(i):
    return (i >> 1) & 1


def s_coords(lane, i):
    """row (0..15) and key of S register i of lane."""
    return lane // 4 + 8 * acc_row(i), 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)


class Kernel:
    def __init__(self, ptx_text, block_n, hdv, dtype, scale_log2, lse_mul):
        self.S = segments(ptx_text)
        self.bn = block_n
        self.hdv = hdv
        self.dtype = dtype
        self.w = Warp({})
        reg = self.S["reg"]
        self.sl2 = scale_log2
        self.lse_mul = lse_mul
        for nm in reg["scale_log2"]:
            self.w.r[nm] = f2b(np.full(L, scale_log2, np.float32))
        # own_max: lane%4 == 0
        for nm in reg["ownmax"]:
            self.w.r[nm] = f2b(np.where(np.arange(L) % 4 == 0, np.float32(1), np.float32(0)))
        self.m, self.l, self.e, self.llse = reg["m"][:2], reg["l"][:2], reg["e"][:2], reg["llse"][:2]
        self.alpha, self.cr, self.noff = reg["alpha"][:2], reg["cr"][:2], reg["noff"][:2]
        self.linv = reg["linv"][:2]
        self.rescale = reg["rescale"][0] if reg["rescale"] else None

    def inject_s(self, S):
        """S: float32 [16, block_n]."""
        for i in range(self.bn // 2):
            v = np.empty(L, np.float32)
            for lane in range(L):
                r, k = s_coords(lane, i)
                v[lane] = S[r, k]
            self.w.r["%%s%d" % i] = f2b(v)

    def p_matrix(self):
        P = np.zeros((16, self.bn), np.float32)
        dec = from_bf16 if self.dtype == "bf16" else from_f16
        for j in range(self.bn // 4):
            a = self.w.val("%%a%d" % j)
            lo, hi = dec(a & 0xFFFF), dec(a >> 16)
            for lane in range(L):
                kk, jj = j // 4, j % 4
                r = lane // 4 + 8 * (jj & 1)
                k = 16 * kk + 8 * (jj >> 1) + 2 * (lane % 4)
                P[r, k] = lo[lane]
                P[r, k + 1] = hi[lane]
        return P

    def pv(self, V):
        """O += P·V for the warp's 16 rows (V: [block_n, hdv] float32, already 16-bit values)."""
        P = self.p_matrix()
        with np.errstate(all="ignore"):
            PV = P.astype(np.float64) @ V.astype(np.float64)
        for i in range(self.hdv // 2):
            ov = b2f(self.w.val("%%o%d" % i)).copy()
            add = np.empty(L, np.float64)
            for lane in range(L):
                r = lane // 4 + 8 * acc_row(i)
                c = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)
                add[lane] = PV[r, c]
            with np.errstate(all="ignore"):
                self.w.r["%%o%d" % i] = f2b((ov.astype(np.float64) + add).astype(np.float32))
        return P

    def state(self):
        d = {}
        for k in ("m", "l", "e", "llse", "cr", "noff", "alpha"):
            for r, nm in enumerate(getattr(self, k)):
                d["%s%d" % (k, r)] = self.w.val(nm).copy()
        d["o"] = np.stack([self.w.val("%%o%d" % i).copy() for i in range(self.hdv // 2)])
        d["a"] = np.stack([self.w.val("%%a%d" % j).copy() for j in range(self.bn // 4)])
        if self.rescale:
            d["rescale"] = self.w.p(self.rescale).copy()
        return d

    def run_tile(self, blocks, V, masked_flags, on_block=None):
        """blocks: list of S matrices [16, bn] in processing order; V: list of V matrices;
        masked_flags: per block (after the first) whether the masked body copy runs."""
        self.w.run(self.S["init"])
        trace = []
        bodies = {b.name: b for b in self.S["bodies"]}
        for j, S in enumerate(blocks):
            if j > 0:
                self.pv(V[j - 1])
            self.inject_s(S)
            if j == 0:
                seg = self.S["peeled"]
            else:
                seg = bodies["masked" if masked_flags[j] and "masked" in bodies else "unmasked"
                             if "unmasked" in bodies else "masked"]
            out = self.w.run(seg)
            assert out is None, out
            trace.append(self.state())
        self.pv(V[len(blocks) - 1])
        final = self.state()
        self.w.run(self.S["epi"])
        # the epilogue's O and LSE (epilogue.c, unchanged by the change): O·inv to 16-bit,
        # LSE = l > 0 ? fma(m, lse_mul, (lg2(l_lse) - e)·ln2) : -inf
        inv = [b2f(self.w.val(n)) for n in self.linv]
        conv = to_bf16 if self.dtype == "bf16" else to_f16
        O = np.stack([conv(b2f(self.w.val("%%o%d" % i)) * inv[acc_row(i)]) for i in range(self.hdv // 2)])
        lse = []
        with np.errstate(all="ignore"):
            for r in range(2):
                lg = lg2_approx(b2f(self.w.val(self.llse[r])))
                lg = lg - b2f(self.w.val(self.e[r]))
                ln = lg * np.float32(0.6931471824645996)
                v = fma32(b2f(self.w.val(self.m[r])), np.full(L, self.lse_mul, np.float32), ln)
                seen = b2f(self.w.val(self.l[r])) > 0
                lse.append(f2b(np.where(seen, v, np.float32(-np.inf))))
        final["O_out"] = O
        final["lse_out"] = np.stack(lse)
        final["l_red"] = np.stack([self.w.val(n).copy() for n in self.l])
        return trace, final
