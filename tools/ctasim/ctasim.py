"""A CPU emulator of one CTA of fa3jit's generated forward kernel (no GPU): every warp of the CTA
interpreted from the kernel's PTX, 32 lanes at a time (numpy), with the machine state the kernel
relies on modeled as the PTX ISA describes it:

  - shared memory (bytes), mbarriers (arrival count, transaction bytes, phase), named barriers
    (bar.sync / bar.arrive with thread counts);
  - TMA (cp.async.bulk.tensor): 4-D tiled loads into 128B-swizzled shared memory (zeros past
    the tensor), completing transaction bytes on the mbarrier; stores back with clipping;
  - wgmma.mma_async m64nNk16 (bf16/fp16, fp32 accumulate), A from a shared-memory descriptor or
    registers, B from a descriptor (K-major or MN-major, 128B swizzle), and m64nNk32 e4m3 (both
    operands K-major; A from a descriptor or 4 registers of 4 bytes), executed at the
    warpgroup's wait_group (deferred: a register or shared-memory hazard between issue and wait
    shows up as a wrong result, not hidden by an eager copy);
  - e4m3 (FP8) values: cvt.rn.satfinite.e4m3x2.f32 (ties to even, saturating to ±448, NaN 0x7F)
    and the wgmma's decode (e4m3_to_f32), prmt.b32's default byte permute;
  - divergence by per-lane masks, reconverging at the lowest program counter.

Warps run in turn until they block (an mbarrier not yet in the phase asked for, a named barrier
not yet full, a warpgroup collective not all there); if every live warp blocks, the CTA is
deadlocked and the emulator says where each warp stands. Timing is not modeled: the interleaving
is one legal order among many (a seed varies it). Written for kernel changes that must be
checked while no GPU is lent (docs/notes.md, session 18). Needs numpy.
"""
import re
import sys
import os

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "probes", "softmax_sim"))
import ptxsim as ps  # noqa: E402  (float32 helpers: fma32, ex2, bf16 conversions)

L = 32
U32 = np.uint32
U64 = np.uint64
M32 = np.uint64(0xFFFFFFFF)
PARAM_BASE = 0x7F0000000000  # generic address of the parameter block


ADDR_RE = re.compile(r"\[(.+?)(?:\+(-?\d+))?\]$")


class SimError(RuntimeError):
    pass


# ------------------------------------------------------------------------------------ parsing

def split_ops(s):
    """Operands separated by commas outside braces and brackets."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def expand_list(tok):
    """'{%s0, %s1}' -> ['%s0', '%s1']"""
    assert tok.startswith("{") and tok.endswith("}"), tok
    return [t.strip() for t in tok[1:-1].split(",") if t.strip()]


class Ins:
    __slots__ = ("text", "pred", "neg", "op", "parts", "ops", "line")

    def __init__(self, text, line):
        self.text = text
        self.line = line
        self.pred = None
        self.neg = False
        m = re.match(r"@(!?)(%[\w]+)\s+(.*)", text)
        if m:
            self.neg = m.group(1) == "!"
            self.pred = m.group(2)
            text = m.group(3)
        op, _, rest = text.partition(" ")
        self.op = op.rstrip(";")
        self.parts = self.op.split(".")
        self.ops = split_ops(rest.rstrip(";").strip()) if rest.strip() else []


def parse(ptx):
    """The entry's body: instructions and labels."""
    body = ptx[ptx.index("{", ptx.index(".entry")) + 1:]
    ins, labels = [], {}
    for n, raw in enumerate(body.splitlines()):
        ln = raw.split("//")[0].strip()
        if not ln or ln.startswith(".reg") or ln == "}":
            continue
        if re.match(r"^\$?[\w$]+:$", ln):
            labels[ln[:-1]] = len(ins)
            continue
        ins.append(Ins(ln, n))
    return ins, labels


# ------------------------------------------------------------------------------------ memory

class Memory:
    """Global memory: regions at fixed base addresses, plus the parameter block."""

    def __init__(self):
        self.regions = []  # (base, np.uint8 array)
        self.next = 0x100000000

    def alloc(self, nbytes, data=None):
        base = self.next
        self.next += ((nbytes + 0xFFFF) & ~0xFFFF) + 0x10000
        buf = np.zeros(nbytes, np.uint8) if data is None else data.view(np.uint8).reshape(-1).copy()
        self.regions.append((base, buf))
        return base

    def find(self, addr, n=1):
        for base, buf in self.regions:
            if base <= addr and addr + n <= base + buf.size:
                return buf, addr - base
        raise SimError("global access outside every allocation: 0x%x (+%d)" % (addr, n))

    def region(self, base):
        for b, buf in self.regions:
            if b == base:
                return buf
        raise SimError("no region at 0x%x" % base)


def prmt(a, b, c):
    """prmt.b32 d, a, b, c (default mode): byte i of d is byte c[4i+2:4i] of the 8 bytes {b, a}
    (a's bytes 0-3, b's 4-7), replaced by its sign bit in all 8 bits when c[4i+3] is set."""
    src = (b.astype(U64) << np.uint64(32)) | a.astype(U64)
    out = np.zeros(a.shape, U64)
    for i in range(4):
        sel = (c.astype(U64) >> np.uint64(4 * i)) & np.uint64(0xF)
        byte = (src >> ((sel & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
        byte = np.where(sel & np.uint64(8), np.where(byte & np.uint64(0x80), np.uint64(0xFF),
                                                     np.uint64(0)), byte)
        out |= byte << np.uint64(8 * i)
    return out.astype(U32)


def swz(addr):
    """128B swizzle of a shared-memory byte address (16-byte chunk XOR the 128-byte row mod 8)."""
    return addr ^ (((addr >> 7) & 7) << 4)


# ------------------------------------------------------------------------------------ e4m3

def _e4m3_table():
    """The 256 e4m3 codes' values (float32): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits,
    subnormals m·2^-9, 0x7F/0xFF NaN, no infinities (0x7E = 448)."""
    t = np.zeros(256, np.float64)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v = np.nan
        elif e == 0:
            v = m * 2.0 ** -9
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = -v if b & 0x80 else v
    return t.astype(np.float32)


E4M3 = _e4m3_table()
_E4M3_POS = E4M3[:127].astype(np.float64)  # codes 0 .. 0x7E, increasing


def e4m3_to_f32(b):
    """e4m3 codes (the low byte of each element) as float32."""
    return E4M3[np.asarray(b).astype(np.int64) & 0xFF]


def f32_to_e4m3(x):
    """float32 values to e4m3 codes (uint32, 0..255) as cvt.rn.satfinite.e4m3x2.f32 rounds each:
    to nearest, ties to the even code, through the subnormals; beyond ±448 (and ±inf) ±448
    (.satfinite); NaN 0x7F."""
    x = np.asarray(x, np.float32)
    ax = np.abs(x).astype(np.float64)
    fin = np.isfinite(ax)
    axc = np.where(fin, np.minimum(ax, 448.0), 448.0)
    hi = np.clip(np.searchsorted(_E4M3_POS, axc, side="left"), 1, 126)
    lo = hi - 1
    dlo, dhi = axc - _E4M3_POS[lo], _E4M3_POS[hi] - axc
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = code | np.where(np.signbit(x), 0x80, 0)
    code = np.where(np.isnan(x), 0x7F, code)
    return code.astype(U32)


class TensorMap:
    """What cuTensorMapEncodeTiled would hold: 4-D or 5-D, dims innermost first (byte strides of
    dims 1.., box extents), 128B swizzle."""

    def __init__(self, gaddr, dtype_bytes, dims, strides, box):
        self.gaddr, self.es, self.dims, self.strides, self.box = gaddr, dtype_bytes, dims, strides, box
        assert box[0] * dtype_bytes == 128, "128B swizzle boxes are 128 bytes wide"


# ------------------------------------------------------------------------------------ the CTA

class Warp:
    def __init__(self, wid):
        self.wid = wid
        self.regs = {}
        self.groups = [(0, np.ones(L, bool))]  # (pc, lane mask)
        self.done = False
        self.block = None  # what it waits on, for the deadlock report
        self.bar_gen = None  # bar.sync: the barrier generation it arrived in
        self.spun = None  # the try_wait that last returned false (the next one at it blocks)


class CTA:
    def __init__(self, prog, labels, mem, params, tmaps, ctaid, nctaid, nthreads, smem_bytes,
                 seed=0, trace=False, stress=False, poison=False, late=None):
        self.prog, self.labels, self.mem, self.tmaps = prog, labels, mem, tmaps
        self.params = params  # bytes
        self.ctaid, self.nctaid = ctaid, nctaid
        self.smem = np.zeros(smem_bytes, np.uint8)  # the launch's size (it holds the kernel's
        # 1024-byte alignment slack: the base is 0, already aligned)
        self.mbar = {}  # addr -> [count, pending, tx, phase]
        self.nbar = {}  # id -> [arrived threads, expected, waiting warp ids]
        self.warps = [Warp(w) for w in range(nthreads // 32)]
        self.rng = np.random.default_rng(seed)
        self.coll = {}  # (warpgroup, pc) -> set of warp ids (collectives)
        self.wg_groups = {}  # warpgroup -> list of committed groups (each a list of pending ops)
        self.wg_open = {}  # warpgroup -> ops issued since the last commit
        self.st_open = {}  # warp -> source ranges of its TMA stores since its last commit
        self.st_groups = {}  # warp -> committed groups of them, not yet read (wait_group.read)
        self.trace = trace
        self.stress = stress  # more uneven interleavings: warps starved for whole rounds
        # poison: a register (or some of its lanes) read before any write holds random bits,
        # kept from then on, instead of 0; each such read is listed in self.uninit by (line,
        # register) with its count (PTX leaves an unwritten register undefined)
        self.poison = poison
        # late = P: a TMA load lands (its bytes written, its transaction bytes counted on the
        # mbarrier) not at its issue but at the end of a scheduling round, each with probability
        # P, and all of them once no warp can move (P = 0: only then): a warp that reads the slot
        # before its wait completes (e.g. one that goes on after a try_wait that said no) reads
        # the old bytes
        self.late, self.loads = late, []
        self.uninit = {}
        self.cur_line, self.cur_act = 0, np.ones(L, bool)
        self.quiet = False  # a read whose value is not used (a wgmma's D at scale-d 0)
        self.steps = 0
        self.pc_count = np.zeros(len(prog) + 1, np.int64)  # warp executions of each instruction
        self.lane = np.arange(L, dtype=U32)

    # ---- registers
    def get(self, w, tok, kind="u32"):
        """Operand value as a 32-lane array of kind u32 / u64 / pred."""
        if tok.startswith("!"):
            return ~self.get(w, tok[1:], "pred")
        if tok.startswith("%"):
            if tok == "%tid.x":
                return (w.wid * 32 + self.lane).astype(U32)
            if tok == "%ctaid.x":
                return np.full(L, self.ctaid, U32)
            if tok == "%nctaid.x":
                return np.full(L, self.nctaid, U32)
            v = w.regs.get(tok)
            if v is None:
                if not self.poison:
                    return np.zeros(L, bool if kind == "pred" else (U64 if kind == "u64" else U32))
                v = self.junk(kind)
                w.regs[tok] = v
                if not self.quiet and self.cur_act.any():
                    k = (self.cur_line, tok)
                    self.uninit[k] = self.uninit.get(k, 0) + 1
            if kind == "u64":
                return v.astype(U64)
            if kind == "pred":
                return v.astype(bool)
            return v.astype(U32) if v.dtype != U32 else v
        if tok == "fa3_smem":
            return np.zeros(L, U32)
        if tok == "fa3_params":
            return np.full(L, PARAM_BASE, U64)
        if tok.startswith(("0f", "0F")):
            return np.full(L, int(tok[2:], 16), U32)
        if tok.startswith(("0x", "0X")):
            v = int(tok, 16)
        else:
            v = int(tok)
        if kind == "u64":
            return np.full(L, v & 0xFFFFFFFFFFFFFFFF, U64)
        return np.full(L, v & 0xFFFFFFFF, U32)

    def junk(self, kind):
        """32 lanes of random bits of kind u32 / u64 / pred (the poison mode's unwritten value)."""
        if kind == "pred":
            return self.rng.integers(0, 2, L).astype(bool)
        if kind == "u64":
            return self.rng.integers(0, 2**63, L, dtype=np.int64).astype(U64)
        return self.rng.integers(0, 2**32, L, dtype=np.int64).astype(U32)

    def set(self, w, tok, val, mask):
        if mask.all():
            w.regs[tok] = val.copy()
            return
        old = w.regs.get(tok)
        if old is None:  # the lanes left out stay unwritten: 0, or random bits when poisoning
            old = (self.junk("pred" if val.dtype == bool else ("u64" if val.dtype == U64 else "u32"))
                   if self.poison else np.zeros_like(val))
        w.regs[tok] = np.where(mask, val, old.astype(val.dtype))

    def f32(self, w, tok):
        return ps.b2f(self.get(w, tok))

    # ---- shared and parameter memory
    def smem_rd(self, addr, nbytes):
        a = int(addr)
        if a < 0 or a + nbytes > self.smem.size:
            raise SimError("shared read outside the allocation: %d" % a)
        return self.smem[a:a + nbytes]

    def addr_of(self, w, tok, kind):
        """[base+off] -> per-lane addresses (u64 for global/param, u32 for shared)."""
        m = ADDR_RE.match(tok)
        base, off = m.group(1), int(m.group(2) or 0)
        if base == "fa3_params":
            return np.full(L, PARAM_BASE + off, U64)
        v = self.get(w, base, "u64" if kind != "shared" else "u32").astype(U64)
        return v + np.uint64(off & 0xFFFFFFFFFFFFFFFF)

    def param_rd(self, a, n):
        off = int(a) - PARAM_BASE
        if off < 0 or off + n > len(self.params):
            raise SimError("parameter read outside the block: %d" % off)
        return self.params[off:off + n]

    # ---- mbarriers
    def mb(self, addr):
        b = self.mbar.get(int(addr))
        if b is None:
            raise SimError("mbarrier at shared %d used before mbarrier.init" % addr)
        return b

    def mb_arrive(self, addr, count=1, tx=0):
        b = self.mb(addr)
        b[2] += tx
        b[1] -= count
        if b[1] < 0:
            raise SimError("mbarrier at %d: more arrivals than its count %d" % (addr, b[0]))
        self.mb_maybe_flip(addr)

    def mb_tx(self, addr, nbytes):
        b = self.mb(addr)
        b[2] -= nbytes
        self.mb_maybe_flip(addr)

    def mb_maybe_flip(self, addr):
        b = self.mbar[int(addr)]
        if b[1] == 0 and b[2] == 0:
            b[3] ^= 1
            b[1] = b[0]

    def stores_pending(self, a, n, what):
        for wid, groups in self.st_groups.items():
            for grp in groups + [self.st_open.get(wid, [])]:
                for lo, hi in grp:
                    if a < hi and lo < a + n:
                        raise SimError("%s writes shared %d..%d while warp %d's TMA store still "
                                       "reads %d..%d (no wait_group.read before)"
                                       % (what, a, a + n, wid, lo, hi))

    # ---- TMA
    def box_rows(self, tm, coords):
        """The box's 128-byte rows in shared-memory order (dimension 1 fastest): for each, its
        global byte offset from the map's address and its bytes inside the tensor (0: a row
        wholly outside, which TMA fills with zeros and clips on a store)."""
        box, nd = tm.box, len(tm.dims)
        idx = [0] * nd
        while True:
            c = [coords[d] + idx[d] for d in range(nd)]
            n_in = 0
            if all(0 <= c[d] < tm.dims[d] for d in range(1, nd)) and c[0] >= 0:
                n_in = max(0, min(box[0], tm.dims[0] - c[0])) * tm.es
            yield c[0] * tm.es + sum(c[d] * tm.strides[d - 1] for d in range(1, nd)), n_in
            d = 1
            while d < nd:
                idx[d] += 1
                if idx[d] < box[d]:
                    break
                idx[d] = 0
                d += 1
            if d == nd:
                return

    def tma_load(self, dst, tm, coords, bar):
        self.stores_pending(dst, int(np.prod(tm.box[1:])) * 128, "a TMA load")
        if self.late is not None:
            self.loads.append((dst, tm, coords, bar))
        else:
            self.tma_land(dst, tm, coords, bar)

    def tma_land(self, dst, tm, coords, bar):
        if self.late is not None:
            self.stores_pending(dst, int(np.prod(tm.box[1:])) * 128, "a TMA load (landing)")
        src_mem, base_off = self.mem.find(tm.gaddr)
        nbytes = int(np.prod(tm.box)) * tm.es
        for r, (g, n_in) in enumerate(self.box_rows(tm, coords)):
            row = np.zeros(128, np.uint8)
            if n_in:
                row[:n_in] = src_mem[base_off + g:base_off + g + n_in]
            a = dst + r * 128
            for ch in range(8):
                p = swz(a + ch * 16)
                self.smem[p:p + 16] = row[ch * 16:ch * 16 + 16]
        self.mb_tx(bar, nbytes)

    def tma_store(self, src, tm, coords):
        dst_mem, base_off = self.mem.find(tm.gaddr)
        for r, (g, n_in) in enumerate(self.box_rows(tm, coords)):
            a = src + r * 128
            row = np.concatenate([self.smem[swz(a + ch * 16):swz(a + ch * 16) + 16]
                                  for ch in range(8)])
            if n_in:
                dst_mem[base_off + g:base_off + g + n_in] = row[:n_in]

    # ---- wgmma
    def desc_addrs(self, desc, rows, kdim, kmajor, es=2):
        """The swizzled byte addresses [rows][kdim] of the operand a descriptor names, elements of
        es bytes (2: bf16/fp16, 1: e4m3) (K-major: rows = M or N, element (r, k) at start + r·128
        + es·k; MN-major (B only, 16-bit): element (k, n) at start + (n // 64)·LBO + k·128 +
        2·(n % 64)), 128B swizzle, SBO 1024."""
        d = int(desc)
        start = (d & 0x3FFF) << 4
        lbo = ((d >> 16) & 0x3FFF) << 4
        sbo = ((d >> 32) & 0x3FFF) << 4
        sw = (d >> 62) & 3
        if sw != 1 or sbo != 1024:
            raise SimError("descriptor 0x%x: only 128B swizzle with SBO 1024 is modeled" % d)
        r = np.arange(rows)[:, None]
        k = np.arange(kdim)[None, :]
        if kmajor:
            a = start + (r // 8) * sbo + (r % 8) * 128 + es * k
        else:  # r = n (column of B), k = k
            if es != 2:
                raise SimError("descriptor 0x%x: an MN-major operand of 8-bit elements" % d)
            a = start + (r // 64) * lbo + (k // 8) * sbo + (k % 8) * 128 + 2 * (r % 64)
        a = a ^ (((a >> 7) & 7) << 4)
        if a.min() < 0 or a.max() + es > self.smem.size:
            raise SimError("descriptor 0x%x reaches past shared memory" % d)
        return a

    def desc_bits(self, addrs, es=2):
        if es == 1:
            return self.smem[addrs].astype(np.uint32)
        return self.smem[addrs].astype(np.uint32) | (self.smem[addrs + 1].astype(np.uint32) << 8)

    def desc_matrix(self, desc, rows, kdim, kmajor, esz_dtype):
        """The operand a descriptor names, as a float array [rows][kdim] (desc_addrs)."""
        es = 1 if esz_dtype == "e4m3" else 2
        h = self.desc_bits(self.desc_addrs(desc, rows, kdim, kmajor, es), es)
        if es == 1:
            return e4m3_to_f32(h)
        return ps.from_bf16(h) if esz_dtype == "bf16" else ps.from_f16(h)

    def wgmma_check(self, op):
        """A wgmma's registers must still hold what they held at its issue (PTX: writing them
        between the wgmma and the wait_group that completes it is undefined)."""
        regs, snap, line = op[9], op[10], op[11]
        for wx, vals in zip(op[8], snap):
            for r, v in zip(regs, vals):
                if not np.array_equal(self.get(wx, r), v):
                    raise SimError("warp %d wrote %s between the wgmma at line %d and its wait"
                                   % (wx.wid, r, line))
        for ad, es, bits in op[12]:
            if not np.array_equal(self.desc_bits(ad, es), bits):
                raise SimError("a shared-memory operand of the wgmma at line %d changed between "
                               "its issue and its wait (read before its load, or overwritten "
                               "before the wait)" % line)

    def wgmma_run(self, op):
        """One deferred wgmma: D (+)= A·B over the 4 warps' registers."""
        kind, n, dregs, a, bdesc, scale_d, tb, dt, warps = op
        # D: thread (warp w, lane l) register i: row 16w + l/4 + 8((i>>1)&1), col 8(i>>2) + 2(l%4) + (i&1)
        lane = np.arange(L)
        D = np.zeros((64, n), np.float32)
        rows_of = lambda w, i: 16 * w + lane // 4 + 8 * ((i >> 1) & 1)
        cols_of = lambda i: 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)
        for wi, w in enumerate(warps):
            for i, r in enumerate(dregs):
                D[rows_of(wi, i), cols_of(i)] = ps.b2f(self.get(w, r))
        kd = 32 if dt == "e4m3" else 16
        if kind == "ss":
            A = self.desc_matrix(a, 64, kd, True, dt)
        elif dt == "e4m3":
            # A (m64nNk32, 8-bit): thread (warp w, lane l) register j holds row 16w + l/4 +
            # 8(j&1), columns 16(j>>1) + 4(l%4) + b in its byte b (byte 0 the lowest): the 16-bit
            # layout with 32-bit units of 4 elements (PTX ISA, "Register Fragments and Shared
            # Memory Matrix Layouts", wgmma .m64nNk32 matrix A)
            A = np.zeros((64, 32), np.float32)
            for wi, w in enumerate(warps):
                for j, r in enumerate(a):
                    v = self.get(w, r)
                    row = 16 * wi + lane // 4 + 8 * (j & 1)
                    col = 16 * (j >> 1) + 4 * (lane % 4)
                    for b in range(4):
                        A[row, col + b] = e4m3_to_f32(v >> U32(8 * b))
        else:
            A = np.zeros((64, 16), np.float32)
            for wi, w in enumerate(warps):
                for j, r in enumerate(a):
                    v = self.get(w, r)
                    lo = (v & 0xFFFF).astype(U32)
                    hi = (v >> 16).astype(U32)
                    conv = ps.from_bf16 if dt == "bf16" else ps.from_f16
                    row = 16 * wi + lane // 4 + 8 * (j & 1)
                    col = 2 * (lane % 4) + 8 * (j >> 1)
                    A[row, col] = conv(lo)
                    A[row, col + 1] = conv(hi)
        B = self.desc_matrix(bdesc, n, kd, not tb, dt)  # [n][k]
        prod = (A.astype(np.float64) @ B.astype(np.float64).T).astype(np.float32)
        out = D + prod if scale_d else prod
        for wi, w in enumerate(warps):
            for i, r in enumerate(dregs):
                w.regs[r] = ps.f2b(out[rows_of(wi, i), cols_of(i)].astype(np.float32))

    # ---- running
    def run(self, max_steps=50_000_000):
        order = list(range(len(self.warps)))
        while True:
            live = [w for w in self.warps if not w.done]
            if not live:
                return
            progressed = False
            self.rng.shuffle(order)
            skip = set()
            if self.stress:  # starve some warps this round (at most all but one)
                skip = {i for i in order if self.rng.random() < 0.4}
                if len(skip) >= len(order):
                    skip.discard(order[0])
            for wid in order:
                w = self.warps[wid]
                if w.done or wid in skip:
                    continue
                budget = int(self.rng.integers(1, 400)) if self.stress else 64 + int(self.rng.integers(0, 64))
                n = self.run_warp(w, budget)
                progressed |= n > 0
            if self.loads:  # late loads land now, some of them, or all where nothing moved
                keep = []
                for ld in self.loads:
                    if not progressed or self.rng.random() < self.late:
                        self.tma_land(*ld)
                        progressed = True
                    else:
                        keep.append(ld)
                self.loads = keep
            if not progressed and skip:
                continue  # the starved warps may be the ones that can move
            if not progressed:
                rep = "; ".join("warp %d at %s: %s" % (w.wid, self.where(w), w.block)
                                for w in self.warps if not w.done)
                raise SimError("deadlock in CTA %d: %s" % (self.ctaid, rep))
            if self.steps > max_steps:
                raise SimError("step limit")

    def where(self, w):
        pc = min(g[0] for g in w.groups)
        return "line %d '%s'" % (self.prog[pc].line, self.prog[pc].text[:60]) if pc < len(self.prog) else "end"

    def run_warp(self, w, budget):
        done = 0
        while done < budget and not w.done:
            w.groups.sort(key=lambda g: g[0])
            # merge groups at the same pc
            merged = []
            for pc, m in w.groups:
                if merged and merged[-1][0] == pc:
                    merged[-1] = (pc, merged[-1][1] | m)
                else:
                    merged.append((pc, m))
            w.groups = merged
            pc, mask = w.groups[0]
            if pc >= len(self.prog):
                raise SimError("warp %d ran past the end" % w.wid)
            ins = self.prog[pc]
            r = self.step(w, ins, pc, mask)
            if r != "block":
                self.pc_count[pc] += 1
            if r == "block":
                return done
            done += 1
            self.steps += 1
        return done

    def step(self, w, ins, pc, mask):
        act = mask
        self.cur_line, self.cur_act = ins.line, mask
        if ins.pred is not None:
            p = self.get(w, ins.pred, "pred")
            act = mask & (~p if ins.neg else p)
        self.cur_act = act
        op, o, parts = ins.op, ins.ops, ins.parts
        base = parts[0]
        if self.trace:
            print("w%d %s" % (w.wid, ins.text[:100]))
        # ---- control flow
        if base == "bra":
            tgt = self.labels[o[0]]
            take, stay = act, mask & ~act
            ng = [g for g in w.groups[1:]]
            if take.any():
                ng.append((tgt, take))
            if stay.any():
                ng.append((pc + 1, stay))
            w.groups = ng
            return None
        if base == "ret":
            rest = mask & ~act
            ng = w.groups[1:]
            if rest.any():
                ng.append((pc + 1, rest))
            w.groups = ng
            if not w.groups:
                w.done = True
            return None
        # everything below runs on the group and moves it on by one
        r = self.exec(w, ins, act, mask, pc)
        if r == "block":
            return "block"
        w.groups[0] = (pc + 1, mask)
        return None

    def collective(self, w, pc, mask, what, work):
        """A warpgroup collective at pc: the last of the 4 warps to arrive does work(warps);
        each then passes. Returns "block" while it waits."""
        if not mask.all():
            raise SimError("warp %d: %s with a partial warp at line %d" % (w.wid, what, self.prog[pc].line))
        wg = w.wid // 4
        st = self.coll.get(wg)
        if st is not None and st["pc"] != pc:
            if st["done"] and w.wid in st["passed"]:
                w.block = "%s: the warpgroup's previous collective not yet passed by all" % what
                return "block"
            raise SimError("warpgroup %d: warp %d at %s (line %d) while others are at line %d"
                           % (wg, w.wid, what, self.prog[pc].line, self.prog[st["pc"]].line))
        if st is None:
            st = self.coll[wg] = {"pc": pc, "arrived": set(), "done": False, "passed": set()}
        if not st["done"]:
            st["arrived"].add(w.wid)
            if len(st["arrived"]) < 4:
                w.block = "%s (warpgroup %d: %d of 4 there)" % (what, wg, len(st["arrived"]))
                return "block"
            work([self.warps[i] for i in sorted(st["arrived"])])
            st["done"] = True
        st["passed"].add(w.wid)
        if len(st["passed"]) == 4:
            del self.coll[wg]
        w.block = None
        return None

    def exec(self, w, ins, act, mask, pc):
        op, o, parts = ins.op, ins.ops, ins.parts
        base = parts[0]
        typ = parts[-1]
        with np.errstate(all="ignore"):
            # ---------------------------------------------------------- wgmma
            if base == "wgmma":
                wg = w.wid // 4
                sub = parts[1]
                if sub == "fence":
                    return self.collective(w, pc, mask, op, lambda ws: None)
                if sub == "commit_group":
                    def commit(ws):
                        self.wg_groups.setdefault(wg, []).append(self.wg_open.pop(wg, []))
                    return self.collective(w, pc, mask, op, commit)
                if sub == "wait_group":
                    keep = int(o[0])

                    def wait(ws):
                        g = self.wg_groups.setdefault(wg, [])
                        while len(g) > keep:
                            grp = g.pop(0)
                            for opx in grp:  # all of the group's before any runs (chained D)
                                self.wgmma_check(opx)
                            for opx in grp:
                                self.wgmma_run(opx[:9])
                    return self.collective(w, pc, mask, op, wait)
                # mma_async: recorded now, run at the wait that completes its group
                m = re.match(r"m64n(\d+)k(16|32)$", parts[4])
                dt = parts[6]
                if not m or (m.group(2) == "32") != (dt == "e4m3") or parts[7] != dt \
                        or dt not in ("bf16", "f16", "e4m3") or parts[5] != "f32":
                    raise SimError("wgmma at line %d: %s not modeled" % (ins.line, op))
                n = int(m.group(1))
                kd = int(m.group(2))
                es = 1 if dt == "e4m3" else 2

                rs = o[1].startswith("{")
                # scale-a, scale-b, then (16-bit only: SS trans-a,) trans-b; 8-bit wgmmas take
                # no transpose immediates (both operands K-major)
                imm = [int(x) for x in o[4:]]
                if len(imm) != (2 if es == 1 else 3 if rs else 4):
                    raise SimError("wgmma at line %d: %d immediates" % (ins.line, len(imm)))
                if imm[0] != 1 or imm[1] != 1 or (es == 2 and not rs and imm[2] != 0):
                    raise SimError("wgmma at line %d: only scale-a/b 1 and a K-major A are "
                                   "modeled (%s)" % (ins.line, ", ".join(o[4:])))

                def issue(ws):
                    dregs = expand_list(o[0])
                    sd = bool(self.get(ws[0], o[3], "pred")[0])
                    if rs:  # RS: A from registers
                        opx = ("rs", n, dregs, expand_list(o[1]), int(self.get(ws[0], o[2], "u64")[0]),
                               sd, int(o[6]) if es == 2 else 0, dt, ws)
                    else:
                        opx = ("ss", n, dregs, int(self.get(ws[0], o[1], "u64")[0]),
                               int(self.get(ws[0], o[2], "u64")[0]), sd,
                               int(o[7]) if es == 2 else 0, dt, ws)
                    # the registers it reads (D, and A for RS) as issued: none may be written
                    # before the wait that completes it (checked there)
                    regs = dregs + (expand_list(o[1]) if rs else [])
                    snap = []
                    for wx in ws:  # D is not read at scale-d 0 (A always is)
                        self.quiet = not sd
                        vals = [self.get(wx, r).copy() for r in dregs]
                        self.quiet = False
                        snap.append(vals + [self.get(wx, r).copy() for r in regs[len(dregs):]])
                    # and the shared-memory operands as they are now: they must be in place
                    # at the issue (their loads waited for) and stay until the wait
                    mem = [self.desc_addrs(opx[4], n, kd, not opx[6], es)]
                    if not rs:
                        mem.append(self.desc_addrs(opx[3], 64, kd, True, es))
                    smem = [(ad, es, self.desc_bits(ad, es)) for ad in mem]
                    self.wg_open.setdefault(wg, []).append(opx + (regs, snap, ins.line, smem))
                return self.collective(w, pc, mask, "wgmma", issue)
            # ---------------------------------------------------------- barriers
            if base == "bar":
                if not act.any() or parts[1] == "warp":  # bar.warp.sync: lanes already in step
                    return None
                if not act.all():
                    raise SimError("warp %d: bar with a partial warp at line %d" % (w.wid, ins.line))
                bid = int(self.get(w, o[0])[0])
                cnt = int(o[1]) if len(o) > 1 else len(self.warps) * 32
                b = self.nbar.setdefault(bid, {"arrived": 0, "gen": 0, "count": cnt})
                if b["count"] != cnt:
                    raise SimError("named barrier %d used with %d and %d threads" % (bid, b["count"], cnt))
                if parts[1] == "arrive":
                    self.nbar_arrive(bid)
                    return None
                # sync: first visit arrives, then waits for the generation to move on
                if w.bar_gen is None:
                    w.bar_gen = b["gen"]
                    self.nbar_arrive(bid)
                if b["gen"] == w.bar_gen:
                    w.block = "bar.sync %d (%d of %d)" % (bid, b["arrived"], cnt)
                    return "block"
                w.bar_gen = None
                return None
            if base == "mbarrier":
                if parts[1] == "init":
                    for lane in np.nonzero(act)[0]:
                        a = int(self.addr_of(w, o[0], "shared")[lane])
                        c = int(o[1])
                        self.mbar[a] = [c, c, 0, 0]
                    return None
                if parts[1] == "try_wait":
                    addrs = self.addr_of(w, o[1], "shared")
                    par = self.get(w, o[2])
                    res = np.zeros(L, bool)
                    for lane in np.nonzero(act)[0]:
                        b = self.mb(addrs[lane])
                        res[lane] = b[3] != (int(par[lane]) & 1)
                    if act.any() and not res[act].all():
                        if w.spun != pc:  # PTX: try_wait may return false; the retry must work
                            w.spun = pc
                            self.set(w, o[0], res, act)
                            return None
                        w.block = "mbarrier at %d, parity %d" % (int(addrs[np.nonzero(act)[0][0]]),
                                                               int(par[np.nonzero(act)[0][0]]))
                        return "block"  # then yield instead of spinning; re-run later
                    w.spun = None
                    self.set(w, o[0], res, act)
                    return None
                if parts[1] == "arrive":
                    addrs = self.addr_of(w, o[1], "shared")
                    cnt = int(o[2]) if len(o) > 2 and "expect_tx" not in parts else 1
                    tx = int(o[2]) if "expect_tx" in parts else 0
                    for lane in np.nonzero(act)[0]:
                        self.mb_arrive(int(addrs[lane]), cnt, tx)
                    return None
                raise SimError("mbarrier op " + op)
            if base == "fence" or base == "setmaxnreg":
                return None
            # ---------------------------------------------------------- TMA
            if base == "cp":
                if parts[1:3] == ["async", "bulk"] and parts[3] == "tensor":
                    for lane in np.nonzero(act)[0]:
                        if parts[5].startswith("shared"):  # load: .shared::cluster.global
                            dst = int(self.addr_of(w, o[0], "shared")[lane])
                            tm_tok, crd = o[1][1:-1].split(",", 1)
                            tma = int(self.get(w, tm_tok.strip(), "u64")[lane]) - PARAM_BASE
                            coords = [int(np.int32(self.get(w, c)[lane].astype(np.uint32).view(np.int32)))
                                      if c.startswith("%") else int(c) for c in expand_list(crd.strip())]
                            bar = int(self.addr_of(w, o[2], "shared")[lane])
                            self.tma_load(dst, self.tmaps[tma], coords, bar)
                        else:  # store: .global.shared::cta.bulk_group
                            tm_tok, crd = o[0][1:-1].split(",", 1)
                            tma = int(self.get(w, tm_tok.strip(), "u64")[lane]) - PARAM_BASE
                            coords = [int(self.get(w, c)[lane].astype(np.uint32).view(np.int32))
                                      if c.startswith("%") else int(c) for c in expand_list(crd.strip())]
                            src = int(self.addr_of(w, o[1], "shared")[lane])
                            self.tma_store(src, self.tmaps[tma], coords)
                            nb = int(np.prod(self.tmaps[tma].box)) * self.tmaps[tma].es
                            self.st_open.setdefault(w.wid, []).append((src, src + nb))
                    return None
                if parts[1:3] == ["async", "bulk"] and parts[3] in ("commit_group", "wait_group"):
                    # the stores copy at issue; their source stays claimed until the issuing
                    # warp's wait_group[.read] N leaves at most N groups (writes into it before
                    # are reported: st.shared and TMA loads check stores_pending)
                    if act.any():
                        if parts[3] == "commit_group":
                            self.st_groups.setdefault(w.wid, []).append(self.st_open.pop(w.wid, []))
                        else:
                            g = self.st_groups.setdefault(w.wid, [])
                            del g[:max(0, len(g) - int(o[0]))]
                    return None
                raise SimError("cp op " + op)
            # ---------------------------------------------------------- memory
            if base in ("ld", "st"):
                space = parts[1]
                vec = 4 if "v4" in parts else 2 if "v2" in parts else 1
                if base == "ld" and vec > 1:  # vector load: vec registers from vec words
                    if typ not in ("u32", "b32", "s32", "f32"):
                        raise SimError("vector load of " + typ)
                    a = self.addr_of(w, o[1], "shared" if space == "shared" else "global")
                    dsts = expand_list(o[0])
                    outs = [np.zeros(L, U32) for _ in dsts]
                    for lane in np.nonzero(act)[0]:
                        if space == "shared":
                            raw = self.smem_rd(a[lane], 4 * vec)
                        else:
                            buf, off = self.mem.find(int(a[lane]), 4 * vec)
                            raw = buf[off:off + 4 * vec]
                        words = np.frombuffer(bytes(raw), U32)
                        for k in range(vec):
                            outs[k][lane] = words[k]
                    for d, v in zip(dsts, outs):
                        self.set(w, d, v, act)
                    return None
                if base == "ld":
                    if space == "param":
                        a = self.addr_of(w, o[1], "param")
                        nb = 8 if typ in ("u64", "s64", "b64") else 4
                        raw = self.param_rd(a[0], nb)
                        v = np.frombuffer(bytes(raw), U64 if nb == 8 else U32)[0]
                        self.set(w, o[0], np.full(L, v, U64 if nb == 8 else U32), act)
                        return None
                    a = self.addr_of(w, o[1], "shared" if space == "shared" else "global")
                    out = np.zeros(L, U32)
                    for lane in np.nonzero(act)[0]:
                        if space == "shared":
                            raw = self.smem_rd(a[lane], 4)
                        else:
                            buf, off = self.mem.find(int(a[lane]), 4)
                            raw = buf[off:off + 4]
                        out[lane] = np.frombuffer(bytes(raw), U32)[0]
                    self.set(w, o[0], out, act)
                    return None
                a = self.addr_of(w, o[0], "shared" if space == "shared" else "global")
                vals = expand_list(o[1]) if vec > 1 else [o[1]]
                vv = [self.get(w, t) for t in vals]
                for lane in np.nonzero(act)[0]:
                    for k, v in enumerate(vv):
                        b = np.array([v[lane]], U32).view(np.uint8)
                        ad = int(a[lane]) + 4 * k
                        if space == "shared":
                            if self.st_groups or self.st_open:
                                self.stores_pending(ad, 4, "st.shared")
                            self.smem[ad:ad + 4] = b
                        else:
                            buf, off = self.mem.find(ad, 4)
                            buf[off:off + 4] = b
                return None
            if base == "atom":
                a = self.addr_of(w, o[1], "global")
                out = np.zeros(L, U32)
                for lane in np.nonzero(act)[0]:
                    buf, off = self.mem.find(int(a[lane]), 4)
                    old = np.frombuffer(bytes(buf[off:off + 4]), U32)[0]
                    out[lane] = old
                    buf[off:off + 4] = np.array([old + int(self.get(w, o[2])[lane])], U32).view(np.uint8)
                self.set(w, o[0], out, act)
                return None
            # ---------------------------------------------------------- warp collectives
            if base == "shfl":
                if not mask.all() or not act.all():
                    raise SimError("shfl with a partial warp at line %d" % ins.line)
                v = self.get(w, o[1])
                k = int(self.get(w, o[2])[0]) if o[2].startswith("%") else int(o[2])
                clamp = int(o[3]) & 31 if not o[3].startswith("%") else 31
                lane = self.lane.astype(np.int64)
                mode = parts[2]
                src = {"bfly": lane ^ k, "idx": np.full(L, k), "up": lane - k, "down": lane + k}[mode]
                # out of range (up: below lane 0; others: past the clamp): the lane's own value
                ok = src >= 0 if mode == "up" else src <= clamp
                src = np.where(ok, src, lane)
                self.set(w, o[0], v[src], act)
                return None
            if base == "vote":
                if not mask.all():
                    raise SimError("vote with a partial warp")
                v = self.get(w, o[1], "pred")
                self.set(w, o[0], np.full(L, bool(v[act].any())), act)
                return None
            # ---------------------------------------------------------- moves
            if base == "mov":
                if o[1].startswith("{") and typ == "b32":  # pack two 16-bit halves
                    lo, hi = expand_list(o[1])
                    v = (self.get(w, lo) & U32(0xFFFF)) | ((self.get(w, hi) & U32(0xFFFF)) << U32(16))
                    self.set(w, o[0], v.astype(U32), act)
                    return None
                if o[0].startswith("{") and typ == "b32":  # unpack into 16-bit halves
                    lo, hi = expand_list(o[0])
                    v = self.get(w, o[1])
                    self.set(w, lo, (v & U32(0xFFFF)).astype(U32), act)
                    self.set(w, hi, (v >> U32(16)).astype(U32), act)
                    return None
                if o[1].startswith("{"):  # pack
                    lo, hi = expand_list(o[1])
                    v = self.get(w, lo).astype(U64) | (self.get(w, hi).astype(U64) << np.uint64(32))
                    self.set(w, o[0], v, act)
                    return None
                if o[0].startswith("{"):  # unpack
                    lo, hi = expand_list(o[0])
                    v = self.get(w, o[1], "u64")
                    self.set(w, lo, (v & M32).astype(U32), act)
                    self.set(w, hi, (v >> np.uint64(32)).astype(U32), act)
                    return None
                if typ in ("b64", "u64"):
                    self.set(w, o[0], self.get(w, o[1], "u64"), act)
                elif typ == "pred":
                    self.set(w, o[0], self.get(w, o[1], "pred"), act)
                else:
                    self.set(w, o[0], self.get(w, o[1]), act)
                return None
            if base == "cvta":
                self.set(w, o[0], self.get(w, o[1], "u64"), act)
                return None
            if base == "selp":
                p = self.get(w, o[3], "pred")
                k = "u64" if typ in ("b64", "u64", "s64") else "u32"
                self.set(w, o[0], np.where(p, self.get(w, o[1], k), self.get(w, o[2], k)), act)
                return None
            if base == "setp":
                r = self.setp(w, parts, o)
                self.set(w, o[0], r, act)
                return None
            if typ == "pred":
                if base in ("and", "or", "xor"):
                    a, b = self.get(w, o[1], "pred"), self.get(w, o[2], "pred")
                    r = a & b if base == "and" else a | b if base == "or" else a ^ b
                    self.set(w, o[0], r, act)
                    return None
                if base == "not":
                    self.set(w, o[0], ~self.get(w, o[1], "pred"), act)
                    return None
            if base == "cvt":
                self.cvt(w, ins, act)
                return None
            if base == "prmt":
                if len(parts) != 2 or typ != "b32":
                    raise SimError("prmt mode not modeled: " + op)
                self.set(w, o[0], prmt(self.get(w, o[1]), self.get(w, o[2]), self.get(w, o[3])), act)
                return None
            if typ == "f32":
                self.fop(w, base, parts, o, act)
                return None
            if typ in ("u32", "s32", "b32", "u64", "s64", "b64"):
                self.iop(w, base, parts, typ, o, act)
                return None
        raise SimError("not modeled: %s (line %d)" % (ins.text, ins.line))

    def nbar_arrive(self, bid):
        b = self.nbar[bid]
        b["arrived"] += 32
        if b["arrived"] > b["count"]:
            raise SimError("named barrier %d: %d arrivals, count %d" % (bid, b["arrived"], b["count"]))
        if b["arrived"] == b["count"]:
            b["arrived"] = 0
            b["gen"] += 1

    def setp(self, w, parts, o):
        cmp = parts[1]
        typ = parts[-1]
        comb = parts[2] if len(parts) == 4 else None
        if typ == "f32":
            a, b = self.f32(w, o[1]), self.f32(w, o[2])
            unord = np.isnan(a) | np.isnan(b)
            c = cmp.rstrip("u") if cmp not in ("nan", "num") else cmp
            r = {"eq": a == b, "ne": a != b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b}[c]
            if cmp.endswith("u") and cmp != "nan":
                r = r | unord
            elif cmp == "ne":
                r = r & ~unord
        else:
            k = "u64" if typ in ("u64", "s64", "b64") else "u32"
            a, b = self.get(w, o[1], k), self.get(w, o[2], k)
            if typ == "s32":
                a, b = a.view(np.int32), b.view(np.int32)
            elif typ == "s64":
                a, b = a.view(np.int64), b.view(np.int64)
            r = {"eq": a == b, "ne": a != b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b,
                 "hi": a > b, "hs": a >= b, "lo": a < b, "ls": a <= b}[cmp]
        if comb == "and":
            r = r & self.get(w, o[3], "pred")
        elif comb == "or":
            r = r | self.get(w, o[3], "pred")
        return r

    def cvt(self, w, ins, act):
        op, o = ins.op, ins.ops
        if op in ("cvt.rn.bf16x2.f32", "cvt.rn.f16x2.f32"):
            conv = ps.to_bf16 if "bf16" in op else ps.to_f16
            hi, lo = conv(self.f32(w, o[1])), conv(self.f32(w, o[2]))
            self.set(w, o[0], ((hi << 16) | lo).astype(U32), act)
        elif op == "cvt.rn.satfinite.e4m3x2.f32":
            # d = {a, b}: the first source in the upper byte, the second in the lower
            hi, lo = f32_to_e4m3(self.f32(w, o[1])), f32_to_e4m3(self.f32(w, o[2]))
            self.set(w, o[0], ((hi << U32(8)) | lo).astype(U32), act)
        elif op == "cvt.rn.bf16.f32":
            self.set(w, o[0], ps.to_bf16(self.f32(w, o[1])).astype(U32), act)
        elif op == "cvt.rn.f16.f32":
            self.set(w, o[0], ps.to_f16(self.f32(w, o[1])).astype(U32), act)
        elif op == "cvt.f32.bf16":
            self.set(w, o[0], ps.f2b(ps.from_bf16(self.get(w, o[1]))), act)
        elif op == "cvt.f32.f16":
            self.set(w, o[0], ps.f2b(ps.from_f16(self.get(w, o[1]))), act)
        elif op == "cvt.u64.u32":
            self.set(w, o[0], self.get(w, o[1]).astype(U64), act)
        elif op == "cvt.s64.s32":
            self.set(w, o[0], self.get(w, o[1]).view(np.int32).astype(np.int64).view(U64), act)
        elif op == "cvt.u32.u64":
            self.set(w, o[0], (self.get(w, o[1], "u64") & M32).astype(U32), act)
        else:
            raise SimError("cvt not modeled: " + ins.text)

    def fop(self, w, base, parts, o, act):
        f = lambda t: self.f32(w, t)
        if base == "add":
            r = f(o[1]) + f(o[2])
        elif base == "sub":
            r = f(o[1]) - f(o[2])
        elif base == "mul":
            r = ps.mul_rp(f(o[1]), f(o[2])) if "rp" in parts else f(o[1]) * f(o[2])
        elif base == "fma":
            r = ps.fma32(f(o[1]), f(o[2]), f(o[3]))
        elif base == "max":
            r = ps.fmax(f(o[1]), f(o[2]), nan_prop="NaN" in parts)
        elif base == "min":
            r = np.fmin(f(o[1]), f(o[2]))
        elif base == "abs":
            r = np.abs(f(o[1]))
        elif base == "neg":
            r = -f(o[1])
        elif base == "ex2":
            r = ps.ex2_approx_ftz(f(o[1]))
        elif base == "lg2":
            r = ps.lg2_approx(f(o[1]))
        elif base == "rcp":
            r = np.float32(1) / f(o[1])
        elif base == "tanh":
            r = np.tanh(f(o[1]).astype(np.float64)).astype(np.float32)
        else:
            raise SimError("f32 op not modeled: " + ".".join(parts))
        r = np.asarray(r, np.float32)
        if "ftz" in parts and base != "ex2":
            r = ps.ftz(r)
        self.set(w, o[0], ps.f2b(r), act)

    def iop(self, w, base, parts, typ, o, act):
        wide = typ in ("u64", "s64", "b64")
        g = lambda t: self.get(w, t, "u64" if wide else "u32").astype(U64)
        r = ps.int_op(base, parts, typ, g(o[1]), g(o[2]) if len(o) > 2 else None,
                      g(o[3]) if base == "mad" else None)
        self.set(w, o[0], r.astype(U64 if wide else U32), act)
