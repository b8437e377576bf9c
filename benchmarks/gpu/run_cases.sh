#!/bin/bash
# Real-GPU cases not yet measured (QLoRA 4/8-bit, eager MoE, long sequences), plus `orch check
# --local`, in one call on a machine with an NVIDIA GPU, torch, transformers, peft and
# nvidia-ml-py; each case in a fresh process so peaks and the context are clean. bitsandbytes,
# where the machine lacks it, goes unpacked into ./site (a wheel is a zip). Results: $OUT.
# Prepared 2026-12-04; not yet run (no GPU machine has been lent since).
# The cases run most-wanted first, and a case starts only while its timeout still fits in
# BUDGET_S (default 540 s: a device call may run at most 600 s), so the call always returns
# its results; the cases left are named in $OUT/log.txt for the next call (SKIP=N skips the
# first N cases).
cd "$(dirname "$0")" || exit 1
BUDGET_S=${BUDGET_S:-540}
SKIP=${SKIP:-0}
case_number=0
export PYTHONPATH=$PWD/site PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
python3 -c "import bitsandbytes, peft, pynvml; print('bnb', bitsandbytes.__version__, 'peft', peft.__version__)" 2>&1 | tail -2
(cd ../.. && timeout 40 python3 -m orchestrator check --local --json > "$OUT/check_local.json" 2> "$OUT/check_local.err"; echo "check rc=$?" >> "$OUT/check_local.err")
run() {
  local t=$1; shift
  case_number=$((case_number + 1))
  [ "$case_number" -le "$SKIP" ] && return
  if [ $((SECONDS + t)) -gt "$BUDGET_S" ]; then
    echo "not run (budget): case $case_number: $*" | tee -a "$OUT/log.txt" >&2
    return
  fi
  echo "== $*" >&2
  timeout "$t" python3 measure_gpu.py "$@" >> "$OUT/results.jsonl" 2>> "$OUT/log.txt" \
    || echo "{\"case\": \"$*\", \"rc\": $?}" >> "$OUT/results.jsonl"
}
run 100 configs/mistral-7b.json 4 2048 amp-bf16 sdpa 1 16 --quantize 4bit
run 110 configs/qwen1.5-moe-a2.7b.json 4 2048 bf16 sdpa 1 16 --steps 6
run 60 configs/llama-3.2-1b.json 1 8192 amp-bf16 sdpa 1 0
run 60 configs/qwen2.5-0.5b.json 2 16384 bf16 sdpa 1 0
run 100 configs/mistral-7b.json 4 2048 amp-bf16 sdpa 1 16 --quantize 8bit --steps 6
run 90 configs/llama-3-8b.json 2 4096 amp-bf16 sdpa 1 16 --quantize 4bit --steps 6
run 120 configs/qwen3-30b-a3b.json 1 2048 bf16 sdpa 1 16 --steps 5
echo "cases done: $case_number listed, SKIP=$SKIP, budget $BUDGET_S s, $SECONDS s used" >&2
