"""CPU tests of bench/compare_report.py, the pure parts of bench/compare.py: the columns' rotation,
the ratios with n/a, the summary statistics and the table (meson test 'bench_compare', or
`python3 -m pytest bench/test_compare.py`). Also imports compare.py, whose torch imports stay
inside its functions."""
import contextlib
import io
import json
import os
import random
import statistics
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402
import compare_report as cr  # noqa: E402


def row(seqlen, fa3jit, cudnn=None, fa4=None, peers=("cudnn", "fa4"), causal=False):
    r = dict(dtype="bf16", head_dim=128, seqlen=seqlen, causal=causal, fa3jit=fa3jit)
    for p, t in (("cudnn", cudnn), ("fa4", fa4)):
        if p in peers:
            r[p] = t
    return cr.add_ratios(r, list(peers))


class Rotation(unittest.TestCase):
    def test_every_column_in_every_place(self):
        for n in range(1, 7):
            cols = [f"c{i}" for i in range(n)]
            for shift in range(4):
                places = {c: set() for c in cols}
                for rnd in range(n):
                    order = cr.rotated(cols, rnd, shift)
                    self.assertEqual(sorted(order), sorted(cols), "a permutation each round")
                    for i, c in enumerate(order):
                        places[c].add(i)
                for c, p in places.items():
                    self.assertEqual(p, set(range(n)), f"{c} over {n} rounds, shift {shift}")

    def test_never_the_same_place_two_rounds_running(self):
        cols = ["fa3jit", "[wg3=0]", "cudnn", "fa4"]
        for rnd in range(8):
            a, b = cr.rotated(cols, rnd), cr.rotated(cols, rnd + 1)
            self.assertTrue(all(x != y for x, y in zip(a, b)), (a, b))

    def test_shift_moves_the_first_column_between_shapes(self):
        cols = ["fa3jit", "cudnn", "fa4"]
        firsts = [cr.rotated(cols, 0, shift)[0] for shift in range(3)]
        self.assertEqual(sorted(firsts), sorted(cols))

    def test_input_untouched_and_empty(self):
        cols = ("a", "b", "c")
        self.assertEqual(cr.rotated(cols, 1), ["b", "c", "a"])
        self.assertEqual(cols, ("a", "b", "c"))
        self.assertEqual(cr.rotated([], 3), [])


class Ratios(unittest.TestCase):
    def test_ratio_na(self):
        self.assertAlmostEqual(cr.ratio(600.0, 500.0), 1.2)
        self.assertIsNone(cr.ratio(None, 500.0))
        self.assertIsNone(cr.ratio(600.0, None))
        self.assertIsNone(cr.ratio(600.0, 0.0))
        self.assertEqual(cr.fmt(None), "n/a")
        self.assertEqual(cr.fmt(1.234, ".2f"), "1.23")

    def test_best_peer(self):
        r = row(1024, 600.0, cudnn=500.0, fa4=640.0)
        self.assertEqual(r["best_peer"], "fa4")
        self.assertAlmostEqual(r["ratio_best"], 600.0 / 640.0)
        self.assertAlmostEqual(r["ratio_cudnn"], 1.2)
        self.assertAlmostEqual(r["ratio"], 1.2, msg="the JSON's older key: fa3jit / cuDNN")
        r = row(1024, 600.0, cudnn=500.0, fa4=None)
        self.assertEqual(r["best_peer"], "cudnn")
        self.assertIsNone(r["ratio_fa4"])
        r = row(1024, 600.0, cudnn=None, fa4=None)
        self.assertIsNone(r["best_peer"])
        self.assertIsNone(r["ratio_best"])

    def test_parse_peers(self):
        self.assertEqual(cr.parse_peers("fa4,cudnn"), ["cudnn", "fa4"])
        self.assertEqual(cr.parse_peers("fa4"), ["fa4"])
        self.assertEqual(cr.parse_peers("none"), [])
        with self.assertRaisesRegex(ValueError, "'fa5'"):
            cr.parse_peers("cudnn,fa5")
        with self.assertRaises(ValueError):
            cr.parse_peers(",")


class Summary(unittest.TestCase):
    def test_stats_against_a_direct_count(self):
        rng = random.Random(7)
        rows = [row(rng.choice([512, 1024, 4096, 16384]), rng.uniform(400, 700),
                    cudnn=rng.uniform(400, 700), fa4=rng.choice([None, rng.uniform(400, 700)]))
                for _ in range(37)]
        s = cr.summary_stats(rows)
        best = [r["fa3jit"] / max(t for t in (r["cudnn"], r["fa4"]) if t is not None)
                for r in rows]
        self.assertEqual(s["n"], 37)
        self.assertEqual(s["wins"], sum(1 for b in best if b >= 1.0))
        self.assertAlmostEqual(s["median"], statistics.median(best))
        self.assertAlmostEqual(s["min"], min(best))
        self.assertIs(s["min_row"], rows[best.index(min(best))])
        self.assertEqual(s["missing_peer"], sum(1 for r in rows if r["fa4"] is None))

    def test_median_even_count_and_win_at_exactly_one(self):
        rows = [row(512, 100.0, cudnn=100.0, fa4=50.0),   # 1.0: a win
                row(1024, 90.0, cudnn=100.0, fa4=80.0),   # 0.9
                row(4096, 120.0, cudnn=100.0, fa4=110.0),  # 1.0909
                row(8192, 70.0, cudnn=100.0, fa4=20.0)]   # 0.7
        s = cr.summary_stats(rows)
        self.assertEqual((s["n"], s["wins"]), (4, 2))
        self.assertAlmostEqual(s["median"], (0.9 + 1.0) / 2)
        self.assertAlmostEqual(s["min"], 0.7)
        self.assertEqual(s["min_row"]["seqlen"], 8192)

    def test_lines_split_by_seqlen(self):
        rows = [row(1024, 90.0, cudnn=100.0, fa4=80.0), row(2048, 110.0, cudnn=100.0, fa4=80.0),
                row(4096, 95.0, cudnn=100.0, fa4=None), row(16384, 80.0, cudnn=None, fa4=None)]
        lines = cr.summary_lines(rows, ["cudnn", "fa4"])
        self.assertEqual(len(lines), 3)
        self.assertIn("all rows: fa3jit >= 1.00x max(cuDNN, FA4) on 1 of 3 rows", lines[0])
        self.assertIn("median 0.950x", lines[0])
        self.assertIn("min 0.900x (bf16 hd128 full 1024, vs cuDNN)", lines[0])
        self.assertIn("seqlen >= 4096: fa3jit >= 1.00x max(cuDNN, FA4) on 0 of 1 rows", lines[1])
        self.assertIn("1 rows against the one peer", lines[1])
        self.assertIn("seqlen < 4096: fa3jit >= 1.00x max(cuDNN, FA4) on 1 of 2 rows", lines[2])
        self.assertIn("median 1.000x", lines[2])
        self.assertEqual(cr.summary_lines([row(512, 1.0, peers=())], []),
                         ["no peer timed (--peers none): no ratios"])
        self.assertIn("no row with a peer timed",
                      cr.summary_lines([row(512, 1.0, peers=("fa4",))], ["fa4"])[1])


class VariantSummary(unittest.TestCase):
    def vrow(self, hd, causal, seqlen, base, variants):
        r = row(seqlen, statistics.median(base), cudnn=100.0, causal=causal)
        r.update(head_dim=hd, fa3jit_runs=base, variants=variants)
        return r

    def test_group_medians_against_a_direct_count(self):
        rng = random.Random(11)
        rows = []
        for hd in (64, 128):
            for causal in (False, True):
                for s in (512, 2048, 4096, 16384):
                    base = [rng.uniform(300, 700) for _ in range(3)]
                    rows.append(self.vrow(hd, causal, s, base, {
                        "a=1": [rng.uniform(300, 700) for _ in range(3)],
                        "b=1": [] if s == 512 else [rng.uniform(300, 700) for _ in range(3)]}))
        lines = cr.variant_lines(rows)
        self.assertEqual(len(lines), 1 + 8 + 1)

        def direct(part, v):
            xs = [statistics.median(r["variants"][v]) / statistics.median(r["fa3jit_runs"])
                  for r in part if r["variants"][v]]
            return statistics.median(xs), len(xs)

        part = [r for r in rows if r["head_dim"] == 64 and r["causal"] and r["seqlen"] < 4096]
        line = [x for x in lines if x.strip().startswith("hd64 causal < 4096")][0]
        m, n = direct(part, "a=1")
        self.assertIn(f"[a=1] {m:.3f} ({n})", line)
        m, n = direct(part, "b=1")  # the 512 row has no rounds of b=1: left out
        self.assertEqual(n, 1)
        self.assertIn(f"[b=1] {m:.3f} (1)", line)
        m, n = direct(rows, "b=1")
        self.assertIn(f"[b=1] {m:.3f} ({n})", lines[-1])
        self.assertTrue(lines[-1].strip().startswith("all rows"))

    def test_identical_column_reads_one_and_none_without_variants(self):
        rows = [self.vrow(256, False, 8192, [500.0, 510.0, 490.0], {"x=0": [490.0, 500.0, 510.0]})]
        self.assertIn("[x=0] 1.000 (1)", cr.variant_lines(rows)[1])
        self.assertEqual(cr.variant_lines([row(512, 1.0)]), [])
        rows[0]["variants"]["x=0"] = []
        self.assertIn("[x=0] n/a (0)", cr.variant_lines(rows)[1])


class Table(unittest.TestCase):
    def test_columns_and_na(self):
        rows = [row(1024, 600.0, cudnn=500.0, fa4=None, causal=True)]
        head, rule, line = cr.table_lines(rows, ["cudnn", "fa4"])
        cells = [c.strip() for c in head.strip("|").split("|")]
        self.assertEqual(cells, ["dtype", "head_dim", "causal", "seqlen", "fa3jit TFLOP/s",
                                 "cuDNN TFLOP/s", "FA4 TFLOP/s", "fa3jit/cuDNN", "fa3jit/FA4",
                                 "fa3jit/max(cuDNN,FA4)"])
        self.assertEqual(rule.count("---"), len(cells))
        self.assertEqual([c.strip() for c in line.strip("|").split("|")],
                         ["bf16", "128", "yes", "1024", "600.0", "500.0", "n/a", "1.200", "n/a",
                          "1.200"])

    def test_one_peer(self):
        head, _, line = cr.table_lines([row(512, 300.0, cudnn=250.0, peers=("cudnn",))],
                                       ["cudnn"])
        self.assertNotIn("max(", head)
        self.assertTrue(line.endswith("| 250.0 | 1.200 |"), line)


class RowLine(unittest.TestCase):
    def test_line(self):
        r = row(512, 300.0, cudnn=250.0, fa4=None)
        r.update(fa3jit_runs=[290.0, 300.0, 310.0], cudnn_runs=[250.0], fa4_runs=[],
                 variants={"wg3=0": [330.0, 320.0], "x=1": []})
        self.assertEqual(cr.row_line(r, ["cudnn", "fa4"]),
                         "bf16 hd128 full      512  fa3jit  300.0  cuDNN  250.0 x1.20  FA4    n/a "
                         "xn/a  max x1.20  (fa3jit 290-310, cuDNN 250-250, FA4 n/a)"
                         "  [wg3=0]  325.0 x1.30  [x=1]    n/a xn/a")


class CompareModule(unittest.TestCase):
    def test_imports_without_torch_and_keeps_its_api(self):
        for name in ("graph_ms", "sweep_shape", "tflops", "fa3_gen_bench", "fa4_tflops",
                     "fa4_import", "choose_peers", "column_timers"):
            self.assertTrue(callable(getattr(compare, name)), name)
        self.assertAlmostEqual(compare.tflops(1, 16, 16384, 128, False, 1000.0),
                               4.0 * 16 * 16384 ** 2 * 128 / 1e12)

    def test_peers_choice(self):
        fa4, why = compare.fa4_import()
        if fa4 is None:  # this machine (no FA4): the default leaves it out, naming it is an error
            self.assertEqual(compare.choose_peers(None), (["cudnn"], None))
            with self.assertRaises(SystemExit) as e:
                compare.choose_peers("cudnn,fa4")
            self.assertIn("flash_attn.cute", str(e.exception.code))
        self.assertEqual(compare.choose_peers("cudnn"), (["cudnn"], None))
        with self.assertRaises(SystemExit):
            compare.choose_peers("cudnn,fa3")

    def test_columns_rotate_with_the_peers(self):
        cols = list(compare.column_timers("bf16", 128, ["wg3=0"], ["cudnn", "fa4"], "bhsd", True))
        self.assertEqual(cols, ["fa3jit", "[wg3=0]", "cudnn", "fa4"])
        self.assertEqual(list(compare.column_timers("bf16", 128, [], ["fa4"], "bhsd", False)),
                         ["fa4"])


class MainWithFakeTimers(unittest.TestCase):
    """compare.main end to end, every library's timer replaced by a fake that logs its calls."""

    def run_main(self, argv, fa4_na=()):
        calls = []

        def gen_bench(gen, args, env=None):
            calls.append(("fa3-gen",) + tuple(args))
            return {(s, c): 450.0 for s in (512, 1024, 2048) for c in (False, True)}

        def fake(name):
            def f(dtype, hd, s, causal, *rest, **kw):
                warm = kw.get("warm_only")
                calls.append((name + (f"[{rest[0]}]" if name == "fa3jit" and rest and rest[0]
                                      else "") + ("-warm" if warm else ""), dtype, hd, s, causal))
                if name == "fa4" and (hd, s) in fa4_na:
                    compare.FA4_NA[(dtype, hd, s, causal)] = "NotImplementedError: fake"
                    return None
                if warm:
                    return None
                return {"fa3jit": 500.0, "cudnn": 400.0, "fa4": 520.0}[name] * (2 if causal else 1)
            return f
        compare.FA4_NA.clear()
        out = io.StringIO()
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(compare, "fa3_python_tflops", fake("fa3jit")), \
                mock.patch.object(compare, "fa3_gen_bench", gen_bench), \
                mock.patch.object(compare, "cudnn_tflops", fake("cudnn")), \
                mock.patch.object(compare, "fa4_tflops", fake("fa4")), \
                mock.patch.object(compare, "fa4_import", lambda: (object(), "flash-attn-4 fake")), \
                mock.patch.object(compare, "peer_versions", lambda p, f: "fakes"), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = compare.main(argv + ["--json", os.path.join(tmp, "c.json")])
            with open(os.path.join(tmp, "c.json")) as f:
                rows = json.load(f)
        self.assertEqual(rc, 0)
        return calls, rows, out.getvalue()

    def test_three_columns_rotated_per_shape(self):
        calls, rows, text = self.run_main(
            ["--dtypes", "bf16", "--head-dims", "64,256", "--seqlens", "512,4096", "--repeat", "3"],
            fa4_na={(256, 4096)})
        self.assertEqual(len(rows), 8)
        for hd in (64, 256):  # FA4's compiles: every shape once, before that head_dim's rounds
            mine = [i for i, c in enumerate(calls) if c[2] == hd]
            warm = [i for i in mine if calls[i][0] == "fa4-warm"]
            self.assertEqual(warm, mine[:4], hd)
        calls = [c for c in calls if c[0] != "fa4-warm"]
        per_shape = {}
        for c in calls:
            per_shape.setdefault(c[1:], []).append(c[0])
        for shape, order in per_shape.items():
            self.assertEqual(len(order), 9, shape)
            rounds = [order[i:i + 3] for i in (0, 3, 6)]
            for place in range(3):
                self.assertEqual(sorted(r[place] for r in rounds), ["cudnn", "fa3jit", "fa4"],
                                 f"{shape}: place {place} over the rounds {rounds}")
        na = [r for r in rows if r["fa4"] is None]
        self.assertEqual([(r["head_dim"], r["seqlen"]) for r in na], [(256, 4096)] * 2)
        self.assertEqual(na[0]["fa4_error"], "NotImplementedError: fake")
        self.assertEqual(na[0]["best_peer"], "cudnn")
        r = rows[0]
        self.assertEqual((r["fa3jit"], r["cudnn"], r["fa4"]), (500.0, 400.0, 520.0))
        self.assertEqual(len(r["fa4_runs"]), 3)
        self.assertAlmostEqual(r["ratio_fa4"], 500 / 520)
        self.assertAlmostEqual(r["ratio_best"], 500 / 520)
        self.assertAlmostEqual(r["ratio"], 500 / 400)
        self.assertIn("| bf16 | 256 | no | 4096 | 500.0 | 400.0 | n/a | 1.250 | n/a | 1.250 |", text)
        self.assertIn("all rows: fa3jit >= 1.00x max(cuDNN, FA4) on 2 of 8 rows", text)
        self.assertIn("seqlen >= 4096: fa3jit >= 1.00x max(cuDNN, FA4) on 2 of 4 rows", text)

    def test_variants_and_one_peer(self):
        calls, rows, text = self.run_main(
            ["--dtypes", "fp16", "--head-dims", "128", "--seqlens", "1024", "--repeat", "3",
             "--peers", "fa4", "--variants", "wg3=0;dbg_no_softmax=1"])
        cols = {c[0] for c in calls}
        self.assertEqual(cols, {"fa3jit", "fa3jit[wg3=0]", "fa3jit[dbg_no_softmax=1]", "fa4",
                                "fa4-warm"})
        self.assertEqual(len(calls), 2 + 2 * 3 * 4)
        self.assertNotIn("cudnn", rows[0])
        self.assertIsNone(rows[0]["ratio"])
        self.assertEqual(rows[0]["variants"]["wg3=0"], [500.0] * 3)
        self.assertIn("| fa3jit TFLOP/s | FA4 TFLOP/s | fa3jit/FA4 |", text)
        self.assertIn("variant / default", text)
        self.assertIn("hd128 full < 4096", text)

    def test_bench_timer(self):
        calls, rows, text = self.run_main(
            ["--fa3-timer", "bench", "--dtypes", "bf16", "--head-dims", "64", "--seqlens",
             "512,4096", "--repeat", "2", "--layout", "bhsd"])
        self.assertEqual(calls.count(("fa3-gen", "--dtype", "bf16", "--head-dim", "64", "--both",
                                      "--layout", "bhsd")), 2)
        self.assertEqual(len(rows), 2, "seqlen 4096: not in fa3-gen's output, no row")
        self.assertEqual([c[0] for c in calls if c[0] not in ("fa3-gen", "fa4-warm")][:4],
                         ["cudnn", "fa4", "fa4", "cudnn"])
        self.assertEqual(rows[0]["fa3jit_runs"], [450.0, 450.0])
        self.assertIn("| bf16 | 64 | no | 512 | 450.0 | 400.0 | 520.0 | 1.125 | 0.865 | 0.865 |",
                      text)


class Variants(unittest.TestCase):
    """check_variant refuses what the library would drop with a warning (and then time the default
    kernel under the variant's name)."""

    def refused(self, variant):
        with self.assertRaises(SystemExit) as e:
            compare.check_variant(variant)
        return str(e.exception.code)

    def test_known_knobs_in_range(self):
        compare.check_variant("dyn_sched=0")
        compare.check_variant("dyn_sched=3,wait_hint=1")
        compare.check_variant("ex2_emu=16")

    def test_out_of_range(self):
        self.assertIn("dyn_sched takes 0..3", self.refused("dyn_sched=4"))
        self.assertIn("ex2_emu takes 0..16", self.refused("wait_hint=1,ex2_emu=17"))

    def test_ab_checks_its_knobs(self):
        import ab
        gen, env, args = ab.parse_variant("dyn_sched=0+@layout=bhsd", "fa3-gen")
        self.assertEqual((env["FA3JIT_PLAN_DEBUG"], args), ("dyn_sched=0", ["--layout", "bhsd"]))
        self.assertIn("dyn_sched takes 0..3", self.refused_ab("dyn_sched=7"))

    def refused_ab(self, variant):
        import ab
        with self.assertRaises(SystemExit) as e:
            ab.parse_variant(variant, "fa3-gen")
        return str(e.exception.code)

    def test_unknown_or_malformed(self):
        self.assertIn("not knob=digit", self.refused("no_such_knob=1"))
        self.assertIn("not knob=digit", self.refused("dyn_sched=-1"))
        self.assertIn("not knob=digit", self.refused("dyn_sched"))



class Gqa(unittest.TestCase):
    """--gqa is checked before anything is timed: a ratio that leaves a head dim's num_heads
    unsplit, or the fa3-gen timer (no GQA shapes), ends the run with the reason."""

    def refused(self, argv):
        with self.assertRaises(SystemExit) as e:
            compare.main(argv)
        return str(e.exception.code)

    def test_ratio_must_divide_every_head_count(self):
        # num_heads = 2048 / head_dim: 32, 16, 8
        self.assertIn("--gqa 16: must be >= 1 and divide num_heads 32, 16, 8",
                      self.refused(["--gqa", "16"]))
        self.assertIn("--gqa 3", self.refused(["--gqa", "3", "--head-dims", "64"]))
        self.assertIn("--gqa 0", self.refused(["--gqa", "0", "--head-dims", "128"]))

    def test_bench_timer_refused(self):
        self.assertIn("--gqa needs --fa3-timer python",
                      self.refused(["--gqa", "2", "--fa3-timer", "bench"]))

    def test_parsed(self):
        self.assertEqual(compare.parse_args(["--gqa", "4"]).gqa, 4)
        self.assertEqual(compare.parse_args([]).gqa, 1)


if __name__ == "__main__":
    unittest.main()
