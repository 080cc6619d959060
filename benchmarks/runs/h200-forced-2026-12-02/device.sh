#!/usr/bin/env bash
# Forced-reply replay (issue 23) on one H200, 2026-12-02: benchmarks/agent_turns.py --forced on
# SmolLM2-135M (+ the trained DFlash draft v1) and on the 7.4 B zero-weight llama shape (with
# Qwen2.5-7B's chat template, so native tool calls have a format), upstream b11434 CUDA built
# through the product. Stages, kit (.devkit/, now with the agent loop's wheels), build and exit
# codes are those of benchmarks/h200-2026-12-02/device.sh; the measurements are measure.sh here.
# Run from the repo root, back to back:
#
#   bash benchmarks/h200-forced-2026-12-02/device.sh stage1       # carry .devkit/whl .devkit/sdist .devkit/c1
#   bash benchmarks/h200-forced-2026-12-02/device.sh stage2 big   # carry .devkit/c2
#   bash benchmarks/h200-forced-2026-12-02/device.sh stage3 smol  # carry .devkit/c3
#   bash benchmarks/h200-forced-2026-12-02/device.sh measure big  # nothing carried: resumes big
export DEVICE_MEASURE=benchmarks/h200-forced-2026-12-02/measure.sh
export EXTRA_IMPORTS=", benchmarks.agent_turns, openai"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../h200-2026-12-02/device.sh" "$@"
