# n-gram lengths and the per-request cap (issue "Speculation that pays"), sourced by
# benchmarks/h200-2026-12-02/device.sh through DEVICE_MEASURE (see this folder's device.sh).
# Forced replays keep a copy under $T/keep and resume from it, so one cut by a call's end
# carries on in the next call on the same machine. SMOL_PART picks the part of the smol set:
# 1 (default) the lengths grid and the bench, 2 the forced sessions and the cap.

GRID=${GRID:-"24,48,64 12,8,32 12,8,64 8,4,16 8,4,32 8,4,64 6,2,64 16,8,64 12,4,64"}

# turns, qwen_template, big74q_preset: the forced run's, shared
. "$ROOT/benchmarks/h200-forced-2026-12-02/measure.sh"

engine_bin() {  # the CUDA llama-server the build installed
  ls "$DFLASH_AGENT_HOME"/cache/engines/*cuda*/bin/llama-server 2>/dev/null | head -1
}

grid_preset() {  # grid_preset M,MIN,MAX: a SmolLM2 preset whose ngram profile has these lengths
  local m n x
  IFS=, read -r m n x <<< "$1"
  grep -q "^\[smol-ng-$m-$n-$x\]" "$DFLASH_AGENT_HOME/config/presets.toml" || \
    cat >> "$DFLASH_AGENT_HOME/config/presets.toml" <<EOT

[smol-ng-$m-$n-$x]
model = "$SMOL"
profile = "ngram"
ctx_size = 16384

[smol-ng-$m-$n-$x.sampling]
temperature = 0.0

[smol-ng-$m-$n-$x.server]
gpu_layers = "all"
flash_attn = "on"
ngram = { n_match = $m, n_min = $n, n_max = $x }
EOT
  echo "smol-ng-$m-$n-$x"
}

measure_smol() {
  if [[ ${SMOL_PART:-1} == 1 ]]; then
    step up-cmd-ngram 60 "${AGENT[@]}" backend up --preset smol-v1 --profile ngram --print-cmd
    turns grid-ref smol-v1 90 --profiles baseline,ngram-fixed --protocols text --no-plain \
      --sessions vercheck-prereleases --ctx-size 16384
    local c p
    for c in $GRID; do
      p=$(grid_preset "$c")
      turns "grid-$p" "$p" 60 --profiles ngram --protocols text --no-plain \
        --sessions vercheck-prereleases
    done
    for set in edit seed; do
      step "bench-ngram-$set" 100 "${AGENT[@]}" backend bench --preset smol-v1 \
        --profiles baseline,ngram-fixed,ngram --prompts "$set" --temperatures 0 \
        --max-tokens 1200 --json "$OUT/bench-ngram-$set.json"
    done
  else
    for set in edit seed; do
      step "bench-ngram2-$set" 70 "${AGENT[@]}" backend bench --preset smol-v1 \
        --profiles baseline,ngram-fixed,ngram --prompts "$set" --temperatures 0 \
        --max-tokens 1200 --json "$OUT/bench-ngram2-$set.json"
    done
    turns forced-smol-ngram smol-v1 250 --profiles baseline,ngram-fixed,ngram --protocols text \
      --no-plain --sessions vercheck-prereleases inventory-report todo-due-dates --ctx-size 16384
    step draft-cap-smol 120 env PYTHONPATH="$ROOT:$PYTHONPATH" "$PY" benchmarks/draft_cap.py --binary "$(engine_bin)" --gpu \
      --model "$SMOL" --draft "$V1" --k 3 --prompts edit --repeats 3 --max-tokens 256 \
      --json "$OUT/draft-cap-smol.json"
  fi
}

measure_big() {
  big74q_preset || return 0
  step draft-cap-smol 110 env PYTHONPATH="$ROOT:$PYTHONPATH" "$PY" benchmarks/draft_cap.py \
    --binary "$(engine_bin)" --gpu --model "$SMOL" --draft "$V1" --k 3 --prompts edit \
    --repeats 3 --max-tokens 256 --json "$OUT/draft-cap-smol.json"
  step draft-cap-big 130 env PYTHONPATH="$ROOT:$PYTHONPATH" "$PY" benchmarks/draft_cap.py \
    --binary "$(engine_bin)" --gpu --model "$BIG/target.gguf" --draft "$BIG/draft.gguf" --k 3 \
    --prompts edit --repeats 3 --max-tokens 128 --json "$OUT/draft-cap-big.json"
  turns forced-big-ngram big74q 360 --profiles baseline,ngram-fixed,ngram --protocols text \
    --no-plain --sessions vercheck-prereleases
}
