#!/usr/bin/env bash
# n-gram lookup's lengths and the per-request draft cap on one H200 (issue "Speculation that
# pays"), 2026-12-02: `ngram` (lengths measured on the agent's own turns) against `ngram-fixed`
# (llama.cpp's) and `baseline`, forced agent turns and `agent backend bench`; and
# benchmarks/draft_cap.py --gpu. Stages, kit (.devkit/), build and exit codes are those of
# benchmarks/h200-2026-12-02/device.sh; the measurements are measure.sh here. From the repo
# root, back to back:
#
#   bash benchmarks/h200-ngram-2026-12-02/device.sh stage1        # carry .devkit/whl .devkit/sdist .devkit/c1
#   bash benchmarks/h200-ngram-2026-12-02/device.sh stage2 none   # carry .devkit/c2
#   bash benchmarks/h200-ngram-2026-12-02/device.sh stage3 smol   # carry .devkit/c3
#   bash benchmarks/h200-ngram-2026-12-02/device.sh measure big   # nothing carried
export DEVICE_MEASURE=benchmarks/h200-ngram-2026-12-02/measure.sh
export EXTRA_IMPORTS=", benchmarks.agent_turns, openai"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../h200-2026-12-02/device.sh" "$@"
