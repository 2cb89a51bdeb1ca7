#!/usr/bin/env bash
# Runs on the H200 (device tool, carry [".gpu"]): SASS check of the shipped kernels, the GPU test
# ladder, fa3-gen check, the Python tests against PyTorch, and bench/compare.py (fa3jit vs cuDNN
# and FA4 in the same run). Logs go to $OUT (or /tmp/fa3jit-gpu). Steps: all by default, or named: sass tests
# edge magnitude fp8tests quantize check pytest checkall compare sass sanitize ab checkvar ncu fp8smoke
# peers (stashes .peers/a: see the step)
# fp8 varlen varlenbench checkvarlen splitkv kvcache
# sanitize_e18 decode checksplit splitpy packgqa blockm64 blockm128 ncu_fa4 ncu_cudnn ktimes tailsplit peerab fastdiv
# tailab. FA3JIT_BENCH_DTYPES picks compare's dtypes; SANITIZE_TOOLS/SECS/SETS the sanitize step's;
# GPU_STEP_LIMIT caps every step's time limit (seconds).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${*:-tests edge magnitude quantize check pytest checkall compare sass sanitize}
# every step named must be one of the case labels below: checked before anything runs
known=" $(grep -oE '^  [a-z0-9_|]+\)' "$0" | tr -d ' )' | tr '|' ' ' | tr '\n' ' ') "
for step in $steps; do
  [[ $known == *" $step "* ]] || { echo "gpu-run: unknown step '$step'; steps:$known" >&2; exit 2; }
done
# the device tool brings back at most 8 files: logs go to $logs, packed into $OUT/logs.tar.gz at
# the end (logs-2.tar.gz, -3, ... for later gpu-run calls in the same device call: session 33's
# compare logs were overwritten by an ab run after it)
dest=${OUT:-/tmp/fa3jit-gpu}; out=$(mktemp -d /tmp/fa3jit-logs.XXXX); mkdir -p "$dest"
export LD_LIBRARY_PATH=$root/.gpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# xz'd libraries are unpacked: a slim bundle's (SLIM=1 gpu-bundle.sh, to travel beside .peers/b)
# and BASE_BUILD's (.gpu/base, for the ab step's variant gen:.gpu/base/fa3-gen)
for z in "$root"/.gpu/libfa3jit.so*.xz "$root"/.gpu/base/libfa3jit.so*.xz; do
  [ -f "$z" ] && xz -dc "$z" > "${z%.xz}" && rm -f "$z"
done
lib=$(ls "$root"/.gpu/libfa3jit.so* | head -n 1) # named by its SONAME (gpu-bundle.sh)
# FA3JIT_CACHE_DIR given: kept between calls while the machine is warm
export FA3JIT_CACHE_DIR=${FA3JIT_CACHE_DIR:-$(mktemp -d)} FA3JIT_LIBRARY=$lib
mkdir -p "$FA3JIT_CACHE_DIR"
gen=$root/.gpu/fa3-gen
rc=0
# logged NAME SECONDS TAIL CMD...: runs CMD with a time limit, its output to $out/NAME.txt and the
# last TAIL lines to the console; a failure (or timeout) fails the run
logged() {
  local name=$1 secs=$2 tail=$3 t0=$SECONDS; shift 3
  [ "$secs" -gt "${GPU_STEP_LIMIT:-$secs}" ] && secs=$GPU_STEP_LIMIT # a cap for untried kernels
  timeout "$secs" "$@" 2>&1 | tee "$out/$name.txt" | tail -"$tail"
  local r=${PIPESTATUS[0]}
  echo "step $name rc=$r $((SECONDS - t0)) s" >> "$out/summary.txt" # the seconds: to plan calls
  [ "$r" = 0 ] || rc=1
}
# smi_start NAME: SM clock, power and temperature every 0.5 s into $out/smi_NAME.csv ($smi: pid)
smi_start() {
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 \
    > "$out/smi_$1.csv" 2>&1 & smi=$!
}
# ab_variants HD: the A/B variants for head_dim HD (AB_VARIANTS_<HD>, else AB_VARIANTS)
ab_variants() {
  local v=AB_VARIANTS_$1
  echo "${!v:-${AB_VARIANTS:-wg3=0 dbg_no_softmax=1}}"
}
# sass_check TAG FLAGS...: compiles the kernel of FLAGS and checks its SASS: setmaxnreg kept
# (two USETMAXREG), no local memory (LDL/STL); a failure fails the run
sass_check() {
  local tag=$1; shift
  $gen --emit-cubin /tmp/k.cubin "$@" >/dev/null || rc=1
  local s n_set n_ldl
  s=$(cuobjdump -sass /tmp/k.cubin)
  n_set=$(grep -c USETMAXREG <<<"$s"); n_ldl=$(grep -c -E '\b(LDL|STL)\b' <<<"$s")
  echo "$tag $*: USETMAXREG $n_set LDL/STL $n_ldl"
  [ "$n_set" -ge 2 ] && [ "$n_ldl" -eq 0 ] || rc=1
}
# peers_setup STEP WHAT: installs the peers (FA4, the cudnn frontend: ../shared/peers/README.md)
# from .peers/a and .peers/b when they were sent, and sets $peer_path to the PYTHONPATH that
# .peers/a/env.sh gives (empty, with a line saying WHAT follows, where they cannot be set up)
# The machine keeps only the paths carried by the last call: .peers/a, sent alone in the call
# before .peers/b (step `peers`), is stashed in /tmp/peers-a and put back here when it is gone.
peers_stash=/tmp/peers-a
peers_setup() {
  peer_path=
  if [ -f "$root/.peers/a/gpu-setup.sh" ]; then
    rm -rf "$peers_stash" && cp -r "$root/.peers/a" "$peers_stash"  # the newest sent
  elif [ -f "$peers_stash/gpu-setup.sh" ]; then
    mkdir -p "$root/.peers" && cp -r "$peers_stash" "$root/.peers/a"
  fi
  if [ ! -f "$root/.peers/a/gpu-setup.sh" ]; then
    echo "$1: no .peers/a on this machine: $2"
  elif (cd "$root" && bash .peers/a/gpu-setup.sh); then
    peer_path=$(bash -c 'source "$1" && echo "$PYTHONPATH"' _ "$root/.peers/a/env.sh")
  else
    echo "$1: the peers' setup failed (above): $2"
  fi
}
# ncu_profile LABEL TAG KERNEL_REGEX SKIP SECS CMD...: ncu's sections (source counters, warp
# states, speed of light, memory) for the launch after SKIP launches of kernels matching
# KERNEL_REGEX in CMD, into $out/ncu_src_TAG.csv and $out/ncu_details_TAG.txt, with a summary; a
# failed run or no profiled launch (no stale report stands in) fails the run
ncu_profile() {
  local label=$1 tag=$2 kre=$3 skip=$4 secs=$5; shift 5
  rm -f /tmp/ncu_$tag.ncu-rep
  timeout "$secs" ncu --clock-control none --target-processes all -k "regex:$kre" \
    --launch-skip "$skip" --launch-count 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --section MemoryWorkloadAnalysis -o /tmp/ncu_$tag -f "$@" \
    > /tmp/ncu_run.txt 2>&1 || { tail -5 /tmp/ncu_run.txt; rc=1; return; }
  [ -f /tmp/ncu_$tag.ncu-rep ] || { echo "$label: no launch profiled"; tail -5 /tmp/ncu_run.txt; rc=1; return; }
  ncu --import /tmp/ncu_$tag.ncu-rep --page source --csv --print-source sass > "$out/ncu_src_$tag.csv" 2>&1
  ncu --import /tmp/ncu_$tag.ncu-rep --page details > "$out/ncu_details_$tag.txt" 2>&1
  echo "$label: $(wc -l < "$out/ncu_src_$tag.csv") SASS rows"
  grep -E " \(|Duration|Elapsed Cycles|SM Active Cycles|Compute .SM. Throughput|DRAM Throughput|L2 Hit Rate|Memory Throughput|Warp Cycles Per Issued" \
    "$out/ncu_details_$tag.txt" | head -14
}
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
$gen --version
for step in $steps; do
  echo "=== $step"
  case $step in
  sass)
    for hd in 64 96 128 192 256; do for dt in bf16 fp16 e4m3; do for m in none causal; do
      flag=; [ $m = causal ] && flag=--causal
      $gen --emit-cubin /tmp/k.cubin --head-dim $hd --dtype $dt $flag >/dev/null || rc=1
      s=$(cuobjdump -sass /tmp/k.cubin)
      n_set=$(grep -c USETMAXREG <<<"$s"); n_mma=$(grep -c -E 'HGMMA|QGMMA' <<<"$s"); n_ldl=$(grep -c -E '\b(LDL|STL)\b' <<<"$s")
      echo "hd$hd $dt $m: USETMAXREG $n_set HGMMA/QGMMA $n_mma LDL/STL $n_ldl"
      [ "$n_set" -ge 2 ] && [ "$n_mma" -ge 1 ] && [ "$n_ldl" -eq 0 ] || rc=1
    done; done; done ;;
  peers) # the call that carries .peers/a alone: stashes it (peers_setup); with .peers/b here
    # too, installs the peers. Then a call carrying [".peers/b", ".gpu"] (SLIM=1 gpu-bundle.sh)
    # runs compare with FA4
    peers_setup peers "sent .peers/a alone? it is stashed in $peers_stash for the next call"
    [ -f "$peers_stash/gpu-setup.sh" ] || rc=1 ;;
  tests) logged test_gpu 300 25 "$root/.gpu/test_gpu" ;;
  fp8smoke) logged fp8_smoke 300 80 python3 "$root/tools/probes/fp8_smoke.py" ${FP8_SMOKE_ARGS:-} ;;
  edge) logged test_edge 300 40 "$root/.gpu/test_edge" ;;
  magnitude) logged test_magnitude 300 20 "$root/.gpu/test_magnitude" ;;
  fp8tests) [ -f "$root/.gpu/test_fwd_args.xz" ] && xz -dc "$root/.gpu/test_fwd_args.xz" > /tmp/test_fwd_args && chmod +x /tmp/test_fwd_args
    logged test_fwd_args 120 15 /tmp/test_fwd_args
    logged test_fp8 560 40 "$root/.gpu/test_fp8" ;;
  quantize) logged test_quantize 300 20 "$root/.gpu/test_quantize" ;;
  varlen) # varlen / paged KV: argument checks with the debug read-back, the GPU cases, the
    # Python varlen tests
    [ -f "$root/.gpu/test_varlen_args.xz" ] && xz -dc "$root/.gpu/test_varlen_args.xz" > /tmp/test_varlen_args && chmod +x /tmp/test_varlen_args
    logged test_varlen_args 120 15 /tmp/test_varlen_args
    logged test_varlen 560 40 "$root/.gpu/test_varlen"
    logged pytest_varlen 400 15 bash -c 'cd "$1" && python3 -m pytest python/tests/test_varlen_torch.py python/tests/test_varlen_args.py -q -rs' _ "$root" ;;
  splitkv) # split-KV's forward kernel: its partials per split against fp64 (test_splitkv), and
    # the SASS of a few split kernels (setmaxnreg kept, no local memory)
    logged test_splitkv 560 40 "$root/.gpu/test_splitkv"
    for f in "--head-dim 128" "--head-dim 64 --causal" "--head-dim 256 --causal --paged-kv" \
             "--head-dim 128 --dtype e4m3 --local --softcap"; do
      sass_check split $f --split-kv
    done
    # the combine kernel alone (fp64 host merge), then fa3_fwd of split configs end to end
    logged test_splitkv_combine 300 25 "$root/.gpu/test_splitkv_combine"
    logged test_splitkv_fwd 300 25 "$root/.gpu/test_splitkv_fwd" ;;
  packgqa) # packed GQA: fa3_fwd of pack_gqa configs against the reference and pack_gqa 0
    # (test_pack_gqa), the SASS of a few packed kernels (setmaxnreg kept, no local memory), then
    # fa3-gen check --pack-gqa (decode shapes, GQA 4 and 8, split_kv 0 and 1)
    logged test_pack_gqa 300 25 "$root/.gpu/test_pack_gqa"
    for f in "--head-dim 128" "--head-dim 64 --causal" "--head-dim 256 --causal --paged-kv --split-kv" \
             "--head-dim 128 --dtype e4m3 --local --softcap --split-kv"; do
      sass_check packgqa $f --pack-gqa
    done
    logged check_packgqa 400 15 $gen check --pack-gqa ;;
  kvcache) # KV-cache append (C: bit for bit, broken contracts, debug read-back) and
    # flash_attn_with_kvcache (Python: E22, E21, E16 against the fp64 reference)
    logged test_kvcache 300 20 "$root/.gpu/test_kvcache"
    logged pytest_kvcache 400 15 bash -c 'cd "$1" && python3 -m pytest python/tests/test_kvcache_torch.py python/tests/test_kvcache_args.py -q -rs' _ "$root" ;;
  varlenbench) # bench/varlen.py: varlen prefill vs dense and FA4, paged page sizes (one run)
    logged varlen_bench 560 60 python3 "$root/bench/varlen.py" ${VARLEN_BENCH_ARGS:-} ;;
  checkall) # dense, then the varlen configs (about 565 s on an H100: over a step's 560 s);
    # CHECKALL_SHARD=I/N runs the I-th of N parts (fa3-gen check --shard): 1/2 and 2/2 in two
    # calls; CHECKALL_SELECT="GLOB;GLOB": only the configs whose labels match (check --select)
    sel=()
    IFS=';' read -ra pats <<< "${CHECKALL_SELECT:-}"
    for p in "${pats[@]}"; do [ -n "$p" ] && sel+=(--select "$p"); done
    logged "check_all${CHECKALL_SHARD:+_${CHECKALL_SHARD/\//of}}${CHECKALL_SELECT:+_select}" 560 15 \
      $gen check --all "${sel[@]}" ${CHECKALL_SHARD:+--shard "$CHECKALL_SHARD"} ;;
  checkvarlen) # fa3-gen check --varlen (default set), then paged KV at page sizes 16 and 1
    # (rectangular and varlen Q)
    logged check_varlen 400 15 $gen check --varlen
    logged check_paged16 400 15 $gen check --paged 16
    logged check_paged1 400 15 $gen check --paged 1 --varlen --head-dim 128 ;;
  check) logged check 400 30 $gen check ;;
  pytest) logged pytest 400 15 bash -c 'cd "$1" && python3 -m pytest python/tests -q -rs' _ "$root" ;;
  compare) # fa3jit, cuDNN and FA4 replayed from CUDA graphs under do_bench in one process, per shape
    # in turn, the columns' order rotated each round, median of COMPARE_REPEAT (3) rounds. FA4 comes
    # from the peers (.peers/a and .peers/b sent first, ../shared/peers/README.md): once they are
    # set up it is required (--peers cudnn,fa4: an FA4 that does not import fails the step);
    # without them, or where their setup failed (said above), FA4 runs only if it imports anyway
    # (a PYTHONPATH from .peers/a/env.sh sourced before), else its column is left out, said so;
    # COMPARE_PEERS overrides (cudnn, fa4, cudnn,fa4 or none). COMPARE_FA3_TIMER=bench: fa3jit by
    # `fa3-gen bench` instead (short bursts: reads high, see docs/notes.md); COMPARE_L2=warm:
    # back-to-back calls; COMPARE_VARIANTS="knob=v;knob=v,knob2=v": extra fa3jit columns (same-run
    # A/B, fair timing); COMPARE_GEMM=1: a cuBLAS 8192^3 product timed the same way;
    # COMPARE_GQA=R: num_heads_k = num_heads / R for every library;
    # COMPARE_HEAD_DIMS, COMPARE_SEQLENS (unset variables leave compare.py's own defaults; only the
    # repeat count differs: 3 here)
    peers_setup compare "FA4 only if it imports from the PYTHONPATH given"
    cmp_peers=${COMPARE_PEERS:-${peer_path:+cudnn,fa4}}
    smi_start compare
    logged compare 560 45 env ${peer_path:+PYTHONPATH="$peer_path"} \
      python3 "$root/bench/compare.py" --fa3-gen $gen --repeat "${COMPARE_REPEAT:-3}" \
      ${cmp_peers:+--peers "$cmp_peers"} \
      ${FA3JIT_BENCH_DTYPES:+--dtypes "$FA3JIT_BENCH_DTYPES"} \
      ${FA3JIT_BENCH_LAYOUT:+--layout "$FA3JIT_BENCH_LAYOUT"} \
      ${COMPARE_FA3_TIMER:+--fa3-timer "$COMPARE_FA3_TIMER"} ${COMPARE_L2:+--l2 "$COMPARE_L2"} \
      ${COMPARE_HEAD_DIMS:+--head-dims "$COMPARE_HEAD_DIMS"} ${COMPARE_SEQLENS:+--seqlens "$COMPARE_SEQLENS"} \
      ${COMPARE_VARIANTS:+--variants "$COMPARE_VARIANTS"} $([ "${COMPARE_GEMM:-0}" = 1 ] && echo --gemm) \
      ${COMPARE_GQA:+--gqa "$COMPARE_GQA"} \
      --json "$out/compare.json"
    kill $smi ;;
  peerab) # tools/probes/peer_ab.py: fa3jit, FA4 and cuDNN in tight alternation, shape by shape
    # (PEERAB_ARGS, e.g. "--shapes 128:16384,256:16384 --causal"; the peers as for compare)
    peers_setup peerab "FA4 must import: the step fails without it"
    smi_start peerab
    logged peerab 560 40 env PYTHONPATH="$root/python:$root/bench${peer_path:+:$peer_path}" \
      python3 "$root/tools/probes/peer_ab.py" ${PEERAB_ARGS:-}
    kill $smi ;;
  compare_layouts) # fa3jit and cuDNN on the same layout, bshd then bhsd (bf16; fa3jit by fa3-gen
    # bench, whose --layout bhsd the Python layer lacks; FA4, where it imports, on its own bshd)
    for l in bshd bhsd; do
      echo "--- layout $l"
      timeout 300 python3 "$root/bench/compare.py" --fa3-gen $gen --dtypes bf16 --layout $l \
        --fa3-timer bench 2>&1 \
        | tee "$out/compare_$l.txt" | grep '^|'
    done ;;
  ab) # same-run A/B of FA3JIT_PLAN_DEBUG variants (bench/ab.py); clocks and power logged beside
    # (AB_DTYPE: bf16 unless set, e.g. e4m3; AB_HEAD_DIMS, AB_VARIANTS[_hd], AB_ROUNDS, AB_MASK)
    smi_start ab
    for hd in ${AB_HEAD_DIMS:-64 128 256}; do
      v=$(ab_variants $hd)
      timeout 300 python3 "$root/bench/ab.py" --fa3-gen $gen --head-dim $hd --rounds ${AB_ROUNDS:-2} \
        --mask ${AB_MASK:-both} --dtype ${AB_DTYPE:-bf16} \
        $v 2>&1 | tee -a "$out/ab.txt"
    done
    kill $smi ;;
  checkvar) # fa3-gen check (156 cases) for each A/B variant: a variant's speed only counts if right
    for hd in ${AB_HEAD_DIMS:-64 128 256}; do
      for var in $(ab_variants $hd); do
        case "+$var" in *+gen:*) echo "$var hd$hd: another build (checked where it was built)"; continue;; esac
        knobs=$(tr '+' '\n' <<<"$var" | grep -v '^@' | paste -sd, -)  # @options: bench only
        [ -n "$knobs" ] || { echo "$var hd$hd: bench options only, kernel = default (checked by check)"; continue; }
        printf '%s hd%s: ' "$knobs" "$hd"
        FA3JIT_PLAN_DEBUG=$knobs timeout 120 $gen check --head-dim $hd 2>&1 | tail -1
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      done
    done ;;
  ncu) # warp-stall samples per SASS instruction of one launch; NCU_SHAPES: ';'-separated
        # fa3-gen bench options, one profile each
    IFS=';' read -ra shapes <<<"${NCU_SHAPES:---head-dim 128 --causal --seqlen 1024}"
    for shape in "${shapes[@]}"; do
      ncu_profile "ncu $shape" "$(tr -c 'a-z0-9' '_' <<<"$shape" | tr -s _)" fa3 2 200 \
        $gen bench $shape --reps 3 --warmup 2
    done ;;
  ncu_fa4) # the ncu step's sections for one FA4 launch per shape (FA4_NCU_SHAPES: ';'-separated
    # tools/probes/fa4_call.py options), beside ours from the ncu step; needs the peers (.peers/a
    # and .peers/b sent first)
    peers_setup ncu_fa4 "no FA4 to profile"
    [ -n "$peer_path" ] || { rc=1; continue; }
    IFS=';' read -ra shapes <<<"${FA4_NCU_SHAPES:---head-dim 128 --seqlen 16384}"
    for shape in "${shapes[@]}"; do
      ncu_profile "ncu FA4 $shape" "fa4$(tr -c 'a-z0-9' '_' <<<"$shape" | tr -s _)" '[Ff]lash' 3 300 \
        env PYTHONPATH="$peer_path" python3 "$root/tools/probes/fa4_call.py" $shape
    done ;;
  ktimes) # tools/probes/kernel_times.py: each library's kernels per call (CUPTI durations, L2
    # flushed) beside its CUDA-graph time as compare takes it; KT_SHAPES, KT_LIBS (fa4 needs the
    # peers sent first), KT_DTYPE, KT_FLUSH (zero,read,none: the L2 state before each call)
    case "${KT_LIBS:-}" in *fa4*) peers_setup ktimes "no FA4 column" ;; esac
    logged ktimes 300 60 env ${peer_path:+PYTHONPATH="$peer_path"} python3 "$root/tools/probes/kernel_times.py" \
      --shapes "${KT_SHAPES:-256:512:causal,128:512:causal}" --libs "${KT_LIBS:-fa3jit,cudnn}" \
      --dtype "${KT_DTYPE:-bf16}" --flush "${KT_FLUSH:-zero,read,none}" ;;
  ncu_cudnn) # the ncu step's sections for one cuDNN fused-attention launch (PyTorch SDPA) per
    # shape (CUDNN_NCU_SHAPES: ';'-separated tools/probes/cudnn_call.py options), beside ours from
    # the ncu step; needs no peers (PyTorch's own cuDNN)
    IFS=';' read -ra shapes <<<"${CUDNN_NCU_SHAPES:---head-dim 256 --seqlen 512 --causal}"
    for shape in "${shapes[@]}"; do
      ncu_profile "ncu cuDNN $shape" "cudnn$(tr -c 'a-z0-9' '_' <<<"$shape" | tr -s _)" 'sdpa|fmha|fprop' 3 300 \
        python3 "$root/tools/probes/cudnn_call.py" $shape
    done ;;
  fp8) # FP8: bench/fp8_accuracy.py (FlashAttention-3's accuracy experiment: RMSE vs fp64, with its
    # targets; fails the run when they are missed or fa3jit's FP8 rows cannot run), then
    # bench/compare_fp8.py (fa3jit FP8 vs cuDNN FP8 vs fa3jit bf16 on the sweep, FP8_REPEAT (2)
    # rounds; FP8_HEAD_DIMS, FP8_SEQLENS narrow it; FP8_ACC_ARGS: extra accuracy options, e.g.
    # "--seed 5"). cuDNN FP8 needs the peers' cudnn frontend: .peers/a and .peers/b sent to this
    # machine first (../shared/peers/README.md); without them its column says what is missing.
    peers_setup fp8 "cuDNN FP8 will be reported missing"
    logged fp8_accuracy 120 30 env ${peer_path:+PYTHONPATH="$peer_path"} \
      python3 "$root/bench/fp8_accuracy.py" ${FP8_ACC_ARGS:-} --json "$out/fp8_accuracy.json"
    smi_start fp8
    logged compare_fp8 400 45 env ${peer_path:+PYTHONPATH="$peer_path"} \
      python3 "$root/bench/compare_fp8.py" --repeat "${FP8_REPEAT:-2}" \
      ${FP8_HEAD_DIMS:+--head-dims "$FP8_HEAD_DIMS"} ${FP8_SEQLENS:+--seqlens "$FP8_SEQLENS"} \
      --json "$out/compare_fp8.json"
    kill $smi ;;
  sanitize_e18) # compute-sanitizer on E18 (paged 16, local window 256/0, 1000 x 1000, batch 3)
    for tool in memcheck racecheck synccheck; do
      logged sanitize_e18_$tool 200 6 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
        $gen check --paged 16 --local --head-dim 128 --window-left 256 --window-right 0 \
        --seqlen-q 1000 --seqlen-k 1000 --batch 3
    done ;;
  checksplit) # fa3-gen check of split-KV configs (num_splits 0: the library's count): the
    # default pairs, then decode shapes (q len 1 and 4 over long keys, GQA) per head dim
    logged check_split 300 6 $gen check --split-kv
    for hd in 64 128 256; do
      logged check_split_decode$hd 200 4 $gen check --split-kv --head-dim $hd --heads 16 --heads-k 2 \
        --seqlen-q 1 --seqlen-k 20000 --batch 2
      logged check_split_decode${hd}c 200 4 $gen check --split-kv --head-dim $hd --causal \
        --heads 8 --heads-k 8 --seqlen-q 4 --seqlen-k 7777 --batch 3
    done
    logged check_split_paged 300 6 $gen check --split-kv --paged 16 --head-dim 128 ;;
  splitpy) logged pytest_splits 300 15 bash -c 'cd "$1" && python3 -m pytest python/tests/test_splits_torch.py -q -rs' _ "$root" ;;
  blockm64) # the decode tile (config block_m 64): fa3_fwd against the reference (test_block_m64),
    # the SASS of a few block_m 64 kernels (setmaxnreg kept, no local memory), fa3-gen check of
    # block_m 64 configs (dense, paged 16, GQA causal hd64), and compute-sanitizer's racecheck and
    # synccheck on one (the kernel without its ping-pong barriers)
    logged test_block_m64 120 40 "$root/.gpu/test_block_m64"
    for f in "--head-dim 128" "--head-dim 64 --causal" "--head-dim 256 --causal --paged-kv" \
             "--head-dim 128 --dtype e4m3 --local --softcap" "--head-dim 128 --split-kv"; do
      sass_check bm64 $f --block-m 64
    done
    logged check_bm64 300 15 $gen check --block-m 64
    logged check_bm64_paged16 300 15 $gen check --block-m 64 --paged 16
    logged check_bm64_hd64_gqa 300 15 $gen check --block-m 64 --head-dim 64 --causal --heads 8 --heads-k 2
    for tool in racecheck synccheck; do
      logged sanitize_bm64_$tool 200 6 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
        $gen check --block-m 64 --causal --seqlen-q 129 --seqlen-k 1000 --batch 2
    done
    # decode GB/s (K+V read once): block_m 128 and 64, each one pass and split-KV
    for f in "" "--split-kv" "--block-m 64" "--block-m 64 --split-kv"; do
      echo "--- bench --decode $f"
      logged "bench_decode${f// /_}" 120 8 $gen bench --decode $f
    done ;;
  blockm128) # head_dim 64's two-consumer tile (block_m 128, fa3_fwd_tune's short causal/local
    # choice): fa3_fwd against the reference (test_block_m64's case), the SASS of two such
    # kernels, fa3-gen check of them (dense, local softcap, paged 16, varlen) and racecheck
    logged test_bm128 200 12 env FA3JIT_TEST_FILTER=test_two_consumer_hd64 "$root/.gpu/test_block_m64"
    for f in "--causal" "--local --softcap --paged-kv --varlen"; do
      sass_check bm128 --head-dim 64 $f --block-m 128
    done
    logged check_bm128 300 6 $gen check --block-m 128 --head-dim 64 --causal
    logged check_bm128_fp16_local 300 6 $gen check --block-m 128 --head-dim 64 --local --softcap --dtype fp16
    logged check_bm128_paged16 300 6 $gen check --block-m 128 --head-dim 64 --causal --paged 16
    logged check_bm128_varlen 300 6 $gen check --block-m 128 --head-dim 64 --causal --varlen
    logged sanitize_bm128_racecheck 200 6 compute-sanitizer --tool racecheck --error-exitcode 9 \
      --print-limit 20 $gen check --block-m 128 --head-dim 64 --causal --seqlen-q 129 --seqlen-k 1000 --batch 2 ;;
  tailsplit) # a dense non-causal call's tail split (runtime/tail.c), forced (tail_split=2: a
    # failure to run it is an error, not a silent fallback): fa3-gen check of shapes whose tiles
    # leave a part round on the card's SMs, against the reference (O NaN-prefilled, LSE), head
    # dims 64-256 and 192/128, both dtypes, softcap, GQA, ragged seqlens, 2 key blocks; the
    # default (tail_split 1) where the model splits (hd128, 2048 tiles of 16k keys); memcheck
    for f in "--head-dim 128 --seqlen-q 4096 --seqlen-k 4096" \
             "--head-dim 128 --dtype fp16 --seqlen-q 4000 --seqlen-k 3000 --softcap" \
             "--head-dim 64 --seqlen-q 5000 --seqlen-k 4100" \
             "--head-dim 256 --heads 6 --heads-k 2 --seqlen-q 3000 --seqlen-k 5000" \
             "--head-dim 192 --head-dim-v 128 --seqlen-q 4096 --seqlen-k 200" \
             "--head-dim 96 --dtype fp16 --seqlen-q 6000 --seqlen-k 1000"; do
      logged "check_tail${f// /_}" 200 2 env FA3JIT_PLAN_DEBUG=tail_split=2 $gen check --batch 2 $f
    done
    logged check_tail_auto 300 2 $gen check --head-dim 128 --batch 1 --heads 64 --seqlen-q 4096 --seqlen-k 16384
    logged sanitize_tail 300 6 env FA3JIT_PLAN_DEBUG=tail_split=2 compute-sanitizer --tool memcheck \
      --error-exitcode 9 --print-limit 20 $gen check --head-dim 128 --batch 2 --seqlen-q 4096 --seqlen-k 300 ;;
  fastdiv) # the fast_div knob (codegen/divide.c; the planner's 2 since session 25): the other
    # values' kernels checked (knob_check: head dims 64/128/256, bf16 and fp16, causal and not,
    # hd128 local, varlen, paged, packed GQA, split-KV, block_m 64, several tiles a CTA,
    # racecheck, synccheck; then e4m3, hd96 and hd192 here), then a same-run A/B of ptxas's
    # divisions (fast_div=0) against the default in tight alternation (tools/probes/tail_ab.py)
    # at the short rows, where a tile's decode is a larger share, and a long row as a control
    for v in ${FASTDIV_VALUES:-0 1}; do
      logged knob_check_fast_div$v 560 12 bash "$root/tools/probes/knob_check.sh" fast_div=$v
      for f in "--dtype e4m3 --head-dim 128 --causal" "--dtype e4m3 --head-dim 256" \
               "--head-dim 96 --causal" "--head-dim 192 --head-dim-v 128 --local"; do
        logged "check_fast_div$v${f// /_}" 200 2 env FA3JIT_PLAN_DEBUG=fast_div=$v $gen check $f
      done
    done
    for m in "" --causal; do
      logged "ab_fast_div${m}" 300 12 env PYTHONPATH="$root/python:$root/bench" \
        python3 "$root/tools/probes/tail_ab.py" --variant fast_div=0 --pairs 21 $m \
        --shapes 64:512,64:1024,128:512,128:1024,256:512,256:1024,64:2048,128:16384
    done ;;
  tailab) # tools/probes/tail_ab.py for each of TAILAB_VARIANTS (space-separated FA3JIT_PLAN_DEBUG
    # settings; default: the kernel before session 27, q_desc_tile and ring_addr off)
    # against the default, causal and not, at TAILAB_SHAPES (hd:seqlen,...)
    for v in ${TAILAB_VARIANTS:-q_desc_tile=0,ring_addr=0}; do
      for m in "" --causal; do
        logged "ab_${v//[=,]/_}${m}" 300 12 env PYTHONPATH="$root/python:$root/bench" \
          python3 "$root/tools/probes/tail_ab.py" --variant "$v" --pairs 21 $m \
          --shapes "${TAILAB_SHAPES:-64:512,128:512,128:4096,64:16384,128:16384,256:16384}"
      done
    done ;;
  decode) # bench/decode.py: decode shapes, fa3jit (chosen / one pass) vs cuDNN and FA4
    logged decode_bench 400 30 python3 "$root/bench/decode.py" --json "$out/decode.json" ;;
  sanitize)
    # compute-sanitizer over every supported config (check --all: 780 dense configs incl. GQA
    # at one small tile-boundary shape, 420 varlen/paged configs in 1260 cases: 2040 cases)
    # with each tool.
    # The cache is warmed first, all cores at once: compiled under the sanitizer one at a time,
    # memcheck did not finish its 150 s on a fresh cache (session 26, H100).
    # SANITIZE_TOOLS picks the tools (default all three), for a call too short for all: with a
    # warm cache racecheck ran about 9.5 cases a second on the H200 (2040 cases: about 215 s).
    # SANITIZE_SETS: ';'-separated check selections instead of --all (e.g. "--head-dim 256
    # --causal;--head-dim 192 --head-dim-v 128 --local"), for a call too short for --all;
    # SANITIZE_SECS: each run's limit (300; racecheck --all took longer than 300 s on an H100,
    # session 28).
    IFS=';' read -ra san_sets <<<"${SANITIZE_SETS:---all}"
    for set in "${san_sets[@]}"; do
      logged "sanitize_warm${set// /_}" 300 3 $gen cache warm $set --jobs "$(nproc)"
    done
    san_secs=${SANITIZE_SECS:-300}; [ "$san_secs" -gt "${GPU_STEP_LIMIT:-$san_secs}" ] && san_secs=$GPU_STEP_LIMIT
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
      for set in "${san_sets[@]}"; do
        echo "--- $tool $set"
        timeout $san_secs compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
          $gen check $set $([ "$set" = --all ] && echo --seqlen-q 129 --seqlen-k 257 --batch 1) \
          > /tmp/sanitize-$tool.txt 2>&1
        r=$?
        { echo "--- $tool $set (exit $r)"; grep -v -E " PASS$" /tmp/sanitize-$tool.txt | tail -40; } >> "$out/sanitize.txt"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, .* failed" /tmp/sanitize-$tool.txt | tail -3
        echo "$tool $set exit $r"; [ $r = 0 ] || rc=1
      done
    done ;;
  esac
done
echo "=== summary"; cat "$out/summary.txt" 2>/dev/null
tarball=$dest/logs.tar.gz n=1
while [ -e "$tarball" ]; do n=$((n + 1)) tarball=$dest/logs-$n.tar.gz; done
tar -czf "$tarball" -C "$out" . && echo "logs: $tarball"
echo "gpu-run rc=$rc"
exit $rc
