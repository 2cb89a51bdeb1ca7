"""The pure parts of bench/compare.py (no torch, no GPU): which peers run, the columns' order in
each round, the ratios of fa3jit to its peers with n/a where a peer did not run, the summary
statistics over the rows and the markdown table. Tested on the CPU by bench/test_compare.py."""
import statistics

PEERS = ("cudnn", "fa4")  # --peers names, in the table's order
PEER_LABELS = {"cudnn": "cuDNN", "fa4": "FA4"}
LONG_SEQLEN = 4096  # the summary's split: seqlen >= LONG_SEQLEN, and below


def parse_peers(text):
    """--peers "cudnn,fa4" -> ["cudnn", "fa4"] in PEERS' order; "none" -> []. ValueError naming
    the bad name."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if names == ["none"]:
        return []
    for p in names:
        if p not in PEERS:
            raise ValueError(f"--peers {text!r}: {p!r} is not one of {', '.join(PEERS)} "
                             "(or 'none')")
    if not names:
        raise ValueError(f"--peers {text!r}: no peer named (use 'none' for fa3jit alone)")
    return [p for p in PEERS if p in names]


def rotated(columns, rnd, shift=0):
    """The columns in the order of round rnd: rotated left by (rnd + shift) places, so that over
    len(columns) consecutive rounds each column is timed once in every place (the first timing
    of a shape read 2-4% low in one run, and the SM clock drifts within a run). shift, the
    shape's index, also moves the first column from shape to shape when the rounds are few."""
    columns = list(columns)
    if not columns:
        return []
    k = (rnd + shift) % len(columns)
    return columns[k:] + columns[:k]


def ratio(a, b):
    """a / b; None (n/a) where either is missing or b is not positive."""
    if a is None or b is None or b <= 0:
        return None
    return a / b


def fmt(x, spec=".1f"):
    """x formatted with spec, or "n/a" where it is missing."""
    return "n/a" if x is None else format(x, spec)


def add_ratios(row, peers):
    """Adds to row (keys "fa3jit" and each peer's TFLOP/s, None where it did not run):
    ratio_<peer> = fa3jit / peer, best_peer (the faster peer that ran, or None) and ratio_best =
    fa3jit / that peer's TFLOP/s. "ratio" stays fa3jit / cuDNN (the JSON's older key)."""
    for p in peers:
        row[f"ratio_{p}"] = ratio(row["fa3jit"], row.get(p))
    ran = [p for p in peers if row.get(p) is not None]
    row["best_peer"] = max(ran, key=lambda p: row[p]) if ran else None
    row["ratio_best"] = ratio(row["fa3jit"], row[row["best_peer"]]) if ran else None
    row["ratio"] = row.get("ratio_cudnn")
    return row


def shape_label(row):
    return (f"{row['dtype']} hd{row['head_dim']} {'causal' if row['causal'] else 'full'} "
            f"{row['seqlen']}")


def summary_stats(rows):
    """Over the rows with a peer measured: n, wins (fa3jit >= 1.0x the faster peer), the median
    of fa3jit / faster peer, its minimum and the row of the minimum; None where no row has one."""
    rs = [r for r in rows if r.get("ratio_best") is not None]
    if not rs:
        return None
    low = min(rs, key=lambda r: r["ratio_best"])
    return dict(n=len(rs), wins=sum(1 for r in rs if r["ratio_best"] >= 1.0),
                median=statistics.median(r["ratio_best"] for r in rs),
                min=low["ratio_best"], min_row=low, missing_peer=sum(1 for r in rs if any(
                    f"ratio_{p}" in r and r[f"ratio_{p}"] is None for p in PEERS)))


def summary_lines(rows, peers):
    """The lines printed after the table: all rows, then seqlen >= LONG_SEQLEN and below."""
    if not peers:
        return ["no peer timed (--peers none): no ratios"]
    what = "max(" + ", ".join(PEER_LABELS[p] for p in peers) + ")" if len(peers) > 1 else \
        PEER_LABELS[peers[0]]
    lines = []
    for label, part in (("all rows", rows),
                        (f"seqlen >= {LONG_SEQLEN}", [r for r in rows if r["seqlen"] >= LONG_SEQLEN]),
                        (f"seqlen < {LONG_SEQLEN}", [r for r in rows if r["seqlen"] < LONG_SEQLEN])):
        s = summary_stats(part)
        if s is None:
            lines.append(f"{label}: no row with a peer timed")
            continue
        low = s["min_row"]
        text = (f"{label}: fa3jit >= 1.00x {what} on {s['wins']} of {s['n']} rows; median "
                f"{s['median']:.3f}x; min {s['min']:.3f}x ({shape_label(low)}, vs "
                f"{PEER_LABELS[low['best_peer']]})")
        if s["missing_peer"]:
            text += f"; {s['missing_peer']} rows against the one peer that ran (other n/a)"
        lines.append(text)
    return lines


def table_lines(rows, peers):
    """The markdown table: the shape (dtype, head_dim, causal, seqlen), fa3jit's and each peer's
    TFLOP/s, fa3jit / each peer, and with two peers fa3jit / the faster of them; n/a where a peer
    did not run."""
    labels = [PEER_LABELS[p] for p in peers]
    head = ["dtype", "head_dim", "causal", "seqlen", "fa3jit TFLOP/s"]
    head += [f"{x} TFLOP/s" for x in labels] + [f"fa3jit/{x}" for x in labels]
    if len(peers) > 1:
        head.append("fa3jit/max(" + ",".join(labels) + ")")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["dtype"], str(r["head_dim"]), "yes" if r["causal"] else "no", str(r["seqlen"]),
                 fmt(r["fa3jit"])]
        # three decimals: the summary counts a row at 0.996 as behind, which ".2f" showed as 1.00
        cells += [fmt(r.get(p)) for p in peers] + [fmt(r.get(f"ratio_{p}"), ".3f") for p in peers]
        if len(peers) > 1:
            cells.append(fmt(r.get("ratio_best"), ".3f"))
        out.append("| " + " | ".join(cells) + " |")
    return out


def spread(runs):
    return f"{min(runs):.0f}-{max(runs):.0f}" if runs else "n/a"


def row_line(row, peers):
    """The line printed as each shape is done: TFLOP/s and ratios, the rounds' spread where there
    are several, each --variants column with its ratio to the faster peer."""
    text = (f"{row['dtype']} hd{row['head_dim']:<3} {'causal' if row['causal'] else 'full  '} "
            f"{row['seqlen']:6d}  fa3jit {row['fa3jit']:6.1f}")
    for p in peers:
        text += f"  {PEER_LABELS[p]} {fmt(row.get(p)):>6} x{fmt(row.get(f'ratio_{p}'), '.2f')}"
    if len(peers) > 1:
        text += f"  max x{fmt(row.get('ratio_best'), '.2f')}"
    if len(row["fa3jit_runs"]) > 1:
        text += "  (" + ", ".join([f"fa3jit {spread(row['fa3jit_runs'])}"] + [
            f"{PEER_LABELS[p]} {spread(row.get(f'{p}_runs'))}" for p in peers]) + ")"
    best = row.get(row["best_peer"]) if row.get("best_peer") else None
    for v, runs in row.get("variants", {}).items():
        t = statistics.median(runs) if runs else None
        text += f"  [{v}] {fmt(t):>6} x{fmt(ratio(t, best), '.2f')}"
    return text


def variant_lines(rows):
    """Each --variants column against the default fa3jit column of the same run: the median over
    a group's rows of median(variant's rounds) / median(default's rounds), by head_dim, mask and
    seqlen below / at least LONG_SEQLEN, then over all rows (a same-run A/B's reading, as
    docs/notes.md reports them). Rows where either column has no rounds are left out; [] without
    variants."""
    names = []
    for r in rows:
        names += [v for v in r.get("variants", {}) if v not in names]
    if not names:
        return []
    groups = {}
    for r in rows:
        key = (r["head_dim"], r["causal"], r["seqlen"] >= LONG_SEQLEN)
        groups.setdefault(key, []).append(r)

    def med(part, v):
        xs = [statistics.median(r["variants"][v]) / statistics.median(r["fa3jit_runs"])
              for r in part if r.get("variants", {}).get(v) and r.get("fa3jit_runs")]
        return (statistics.median(xs), len(xs)) if xs else (None, 0)

    def line(label, part):
        cells = [f"[{v}] {fmt(m, '.3f')} ({n})" for v in names for m, n in [med(part, v)]]
        return f"  {label:<22}" + "  ".join(cells)

    out = ["variant / default (same run; median of the group's rows, rows in brackets):"]
    for hd, causal, long_ in sorted(groups):
        out.append(line(f"hd{hd} {'causal' if causal else 'full'} "
                        f"{'>=' if long_ else '<'} {LONG_SEQLEN}", groups[(hd, causal, long_)]))
    out.append(line("all rows", rows))
    return out
