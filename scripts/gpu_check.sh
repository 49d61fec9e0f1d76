#!/usr/bin/env bash
# The executor on one GPU: install from handed wheels (no network), run every CUDA-capable test, the GPU
# benchmarks, and a short training run; write a report. Within 8 minutes on one H100 (docs/train.md).
#
#   ../shared/tools/gpu-wheels.sh .whl        # here, with network: the wheels the GPU machine lacks
#   bash scripts/gpu_check.sh [WHEELS=.whl] [OUT=$OUT or gpu-report]   # there, from the repository root
#
# Needs only a Python with a CUDA build of torch (and numpy, pyarrow, tokenizers, pytest: the GPU image's).
# Writes OUT/report.md (device, versions, test summary, benchmark tables), OUT/tests.log, OUT/junit.xml,
# OUT/train.log, OUT/plan_memory.log, OUT/bench.log. Exit status: pytest's. The untimed GPU work (a tiny
# training run, plan's memory check) runs beside the tests; the benchmark runs alone.
# Env: TEST_TIMEOUT_S (300), PLAN_TIMEOUT_S (150), BENCH_TIMEOUT_S (220), BENCH_ARGS, TINY_BENCH=1, and
# TOTAL_S (470): every timeout is cut to what is left of that, so the whole script ends within 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
wheels=${1:-.whl}
out=${2:-${OUT:-gpu-report}}
mkdir -p "$out"
report="$out/report.md"
started=$(date +%s)
deadline=$(( started + ${TOTAL_S:-470} ))
# at most $1 seconds, and never past the deadline (at least 1, so that timeout still runs)
budget() { local left=$(( deadline - $(date +%s) )); [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"; }
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore TOKENIZERS_PARALLELISM=false

say() { printf '%s\n' "$*" | tee -a "$report"; }
: >"$report"

# ---- install (offline): the handed wheels into a private folder, then packcfg itself, editable
site=/tmp/packcfg-gpu-site
if ls "$wheels"/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$wheels"/*.whl || { say "install: the wheels in $wheels did not install"; exit 3; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -m pip install -q --no-deps --no-index --no-build-isolation -e . >/dev/null 2>&1 ||
  export PYTHONPATH="$PWD:${PYTHONPATH:-}"  # no setuptools there: import from the checkout
"$PY" - <<'PY' || { say "install: packcfg's train flow does not import (see above)"; exit 3; }
import torch, megatron.core, packcfg.train.model  # noqa: F401
assert torch.cuda.is_available(), "no CUDA device visible"
PY

say "# packcfg on one GPU ($(date -u '+%Y-%m-%d %H:%M UTC'))"
say ""
"$PY" - <<'PY' | tee -a "$report"
import importlib.metadata as md, platform, torch
from packcfg.train import varlen
p = torch.cuda.get_device_properties(0)
def v(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "absent"
print(f"- device: {torch.cuda.get_device_name()} ({p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs), "
      f"{torch.cuda.device_count()} visible")
print(f"- Python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"megatron-core {v('megatron-core')}, transformer-engine {v('transformer-engine')}, flash-attn {v('flash-attn')}")
fused = [m for m in varlen.FUSED_METHODS if varlen.available(m)]
print(f"- fused varlen attention available: {', '.join(fused) or 'none'}")
found = varlen._torch_varlen()
if found:
    print(f"- torch varlen_attn keywords: {', '.join(sorted(found[1] - {'query', 'key', 'value'}))}")
PY
# probe: does the flash kernel under varlen_attn take key/value groups as they are (GQA, no repeat)?
timeout "$(budget 60)" "$PY" scripts/gpu_probe_gqa.py 2>"$out/probe.log" | tee -a "$report" || say "- GQA probe failed (exit $?; see probe.log)"

# ---- beside the tests (nothing here is timed): the tiny recipe end to end on one GPU, bf16 (the fused
# attention path), then packcfg plan's memory estimate against the executor's measured peak
run=$(mktemp -d)
(
  ( cd "$run" && timeout "$(budget 120)" "$PY" -m packcfg train "$OLDPWD/recipes/tiny_cpu_sft.yaml" --nproc-per-node 1 \
      model.bf16=true train.train_iters=20 checkpoint.save_interval=10 ) >"$out/train.log" 2>&1
  echo $? >"$out/train.rc"
  timeout "$(budget "${PLAN_TIMEOUT_S:-150}")" "$PY" bench/plan.py --memory >"$out/plan_memory.log" 2>&1
  echo $? >"$out/plan_memory.rc"
) &
beside=$!

# ---- every test that exercises torch (tests/train, tests/demo); multi-rank ones skip on one GPU
t0=$(date +%s)
workers=$(( $(nproc) / 2 )); [ "$workers" -gt 8 ] && workers=8
xdist=()
"$PY" -c "import xdist" 2>/dev/null && [ "$workers" -gt 1 ] && xdist=(-n "$workers" --dist loadfile)
timeout "$(budget "${TEST_TIMEOUT_S:-300}")" "$PY" -m pytest tests/train tests/demo -q -p no:cacheprovider -rfEs \
  "${xdist[@]}" --junitxml="$out/junit.xml" >"$out/tests.log" 2>&1
rc=$?
tests_s=$(( $(date +%s) - t0 ))
wait "$beside"

say ""
say "## Tests (tests/train, tests/demo) on CUDA"
[ "$rc" = 124 ] && say "(the test run was stopped by its timeout after $tests_s s)"
say ""
say '```'
grep -E '^(FAILED|ERROR)|passed|failed' "$out/tests.log" | tail -40 | tee -a "$report" >/dev/null
grep -E '^SKIPPED' "$out/tests.log" | sed -E 's/^SKIPPED \[[0-9]+\] //' | sort | uniq -c | sort -rn | head -12 >>"$report"
say '```'
say "(pytest exit $rc, $tests_s s)"

say ""
say "## packcfg train, tiny recipe, one GPU, bf16 (run beside the tests: its tok/s are not a measurement)"
say '```'
grep -E 'packcfg train:|step +(1|10|20)/|saved|Error|error' "$out/train.log" | head -10 | tee -a "$report" >/dev/null
say '```'
say "(exit $(cat "$out/train.rc" 2>/dev/null || echo '?'); longest log line $(awk '{ if (length($0) > m) m = length($0) } END { print m+0 }' "$out/train.log") characters)"

say ""
say "## packcfg plan: estimated vs measured peak memory (bench/plan.py --memory)"
say '```'
grep -vE '^(USDT|packcfg train:|saved )' "$out/plan_memory.log" | tail -8 | tee -a "$report" >/dev/null
say '```'
say "(exit $(cat "$out/plan_memory.rc" 2>/dev/null || echo '?'))"

# ---- benchmarks, alone on the GPU: 1B-class Llama at seq 4096, bf16 (TINY_BENCH=1: also the tiny preset)
say ""
# shellcheck disable=SC2086  # BENCH_ARGS: extra words for bench/train.py (e.g. "--mixes realistic")
timeout "$(budget "${BENCH_TIMEOUT_S:-220}")" "$PY" bench/train.py --preset 1b --samples 96 --rounds 2 ${BENCH_ARGS:-} >"$out/bench.log" 2>&1 ||
  say "(bench/train.py --preset 1b stopped: exit $?; see bench.log)"
cat "$out/bench.log" >>"$report"
say ""
if [ "${TINY_BENCH:-0}" = 1 ]; then
  timeout "$(budget 60)" "$PY" bench/train.py --preset tiny --no-profiles --rounds 2 --samples 64 >"$out/bench_tiny.log" 2>&1 ||
    say "(bench/train.py --preset tiny stopped: exit $?)"
  cat "$out/bench_tiny.log" >>"$report"
fi

say ""
say "(gpu_check.sh: $(( $(date +%s) - started )) s in all)"
exit "$rc"
