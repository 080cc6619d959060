#!/usr/bin/env bash
# CPU measurement run, 2026-12-05 (2-core CPU). Commands run verbatim, in order.
# Wall time of each is appended as a comment after it (and in times.txt).
set -o pipefail
cd /work/main && source .venv/bin/activate
export DFLASH_AGENT_HOME=/tmp/cpu-1205-home
S=benchmarks/cpu-first-2026-12-05
mkdir -p "$S"
# No `agent backend build`: the engine this tree's build would make (key llama.cpp-11434-cpu-avx512-6f16ea1fae, same key the current code computes) was already built in /tmp/cpu-1204-home, so its cache/engines folder is copied in and the build is skipped.
mkdir -p "$DFLASH_AGENT_HOME/cache" && cp -a /tmp/cpu-1204-home/cache/engines "$DFLASH_AGENT_HOME/cache/engines"
# -> wall 0.0 s, exit 0
agent backend download smollm2-135m-dflash 2>&1 | tee $S/download.log
# -> wall 7.9 s, exit 0
agent backend calibrate --preset smollm2-135m-dflash --json benchmarks/cpu-first-2026-12-05/calibrate.json 2>&1 | tee $S/calibrate.log
# -> wall 72.8 s, exit 0
rm -rf "$DFLASH_AGENT_HOME/state/speculation/acceptance"
# -> wall 0.0 s, exit 0
agent backend bench --preset smollm2-135m-dflash --profiles baseline,ngram,dflash --prompts edit --temperatures 0 --max-tokens 256 --repeats 2 --json benchmarks/cpu-first-2026-12-05/first-edit-t0.json 2>&1 | tee benchmarks/cpu-first-2026-12-05/first-edit-t0.log
# -> wall 35.1 s, exit 0
cp "$DFLASH_AGENT_HOME"/state/speculation/acceptance/*.json benchmarks/cpu-first-2026-12-05/acceptance-first-edit-t0.json
# -> wall 0.0 s, exit 0
rm -rf "$DFLASH_AGENT_HOME/state/speculation/acceptance"
# -> wall 0.0 s, exit 0
agent backend bench --preset smollm2-135m-dflash --profiles baseline,ngram,dflash --prompts edit --temperatures 0.7 --max-tokens 256 --repeats 2 --json benchmarks/cpu-first-2026-12-05/first-edit-t0.7.json 2>&1 | tee benchmarks/cpu-first-2026-12-05/first-edit-t0.7.log
# -> wall 42.4 s, exit 0
cp "$DFLASH_AGENT_HOME"/state/speculation/acceptance/*.json benchmarks/cpu-first-2026-12-05/acceptance-first-edit-t0.7.json
# -> wall 0.0 s, exit 0
rm -rf "$DFLASH_AGENT_HOME/state/speculation/acceptance"
# -> wall 0.0 s, exit 0
agent backend bench --preset smollm2-135m-dflash --profiles baseline,ngram,dflash --prompts seed --temperatures 0 --max-tokens 256 --repeats 2 --json benchmarks/cpu-first-2026-12-05/first-seed-t0.json 2>&1 | tee benchmarks/cpu-first-2026-12-05/first-seed-t0.log
# -> wall 38.3 s, exit 0
cp "$DFLASH_AGENT_HOME"/state/speculation/acceptance/*.json benchmarks/cpu-first-2026-12-05/acceptance-first-seed-t0.json
# -> wall 0.0 s, exit 0
rm -rf "$DFLASH_AGENT_HOME/state/speculation/acceptance"
# -> wall 0.0 s, exit 0
agent backend bench --preset smollm2-135m-dflash --profiles baseline,ngram,dflash --prompts seed --temperatures 0.7 --max-tokens 256 --repeats 2 --json benchmarks/cpu-first-2026-12-05/first-seed-t0.7.json 2>&1 | tee benchmarks/cpu-first-2026-12-05/first-seed-t0.7.log
# -> wall 42.7 s, exit 0
cp "$DFLASH_AGENT_HOME"/state/speculation/acceptance/*.json benchmarks/cpu-first-2026-12-05/acceptance-first-seed-t0.7.json
# -> wall 0.0 s, exit 0
# Code state: HEAD 5a71e18 plus another engineer's uncommitted working-tree edits (git diff --stat: README.md, backend/measure/calibrate.py, backend/serve/tuning.py, two tests).
# backend/serve/tuning.py was last modified 04:49:11 UTC, after calibrate had started (04:48:02) and before the first bench (04:49:16), so all four benches ran the edited _launch (off => launch without the draft).
# backend/measure/calibrate.py was last modified 04:49:30, after calibrate finished (04:49:15): calibrate.log has HEAD's wording ("off keeps it loaded").
