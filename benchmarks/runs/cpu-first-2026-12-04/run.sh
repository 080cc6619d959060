#!/usr/bin/env bash
# CPU measurement run, 2026-12-04 (2-core CPU). Commands run verbatim, in order.
# Wall time of each is appended as a comment after it (and in times.txt).
set -o pipefail
cd /work/main && source .venv/bin/activate
export DFLASH_AGENT_HOME=/tmp/cpu-1204-home
S=benchmarks/cpu-first-2026-12-04
mkdir -p "$S"
agent backend build 2>&1 | tee $S/build.log
# -> wall 265.4 s, exit 0
agent backend download smollm2-135m-dflash 2>&1 | tee $S/download.log
# -> wall 5.4 s, exit 0
agent backend calibrate --preset smollm2-135m-dflash --json benchmarks/cpu-first-2026-12-04/calibrate.json 2>&1 | tee $S/calibrate.log
# -> wall 80.0 s, exit 0
rm -rf "$DFLASH_AGENT_HOME/state/speculation/acceptance"
# -> wall 0.0 s, exit 0
agent backend bench --preset smollm2-135m-dflash --profiles baseline,ngram,dflash --prompts edit --temperatures 0 --max-tokens 256 --repeats 2 --json benchmarks/cpu-first-2026-12-04/first-edit-t0.json 2>&1 | tee benchmarks/cpu-first-2026-12-04/first-edit-t0.log
# -> wall 37.9 s, exit 0
cp "$DFLASH_AGENT_HOME"/state/speculation/acceptance/*.json benchmarks/cpu-first-2026-12-04/acceptance-first-edit-t0.json
# -> wall 0.0 s, exit 0
rm -rf "$DFLASH_AGENT_HOME/state/speculation/acceptance"
# -> wall 0.0 s, exit 0
agent backend bench --preset smollm2-135m-dflash --profiles baseline,ngram,dflash --prompts edit --temperatures 0.7 --max-tokens 256 --repeats 2 --json benchmarks/cpu-first-2026-12-04/first-edit-t0.7.json 2>&1 | tee benchmarks/cpu-first-2026-12-04/first-edit-t0.7.log
# -> wall 44.3 s, exit 0
cp "$DFLASH_AGENT_HOME"/state/speculation/acceptance/*.json benchmarks/cpu-first-2026-12-04/acceptance-first-edit-t0.7.json
# -> wall 0.0 s, exit 0
rm -rf "$DFLASH_AGENT_HOME/state/speculation/acceptance"
# -> wall 0.0 s, exit 0
agent backend bench --preset smollm2-135m-dflash --profiles baseline,ngram,dflash --prompts seed --temperatures 0 --max-tokens 256 --repeats 2 --json benchmarks/cpu-first-2026-12-04/first-seed-t0.json 2>&1 | tee benchmarks/cpu-first-2026-12-04/first-seed-t0.log
# -> wall 38.4 s, exit 0
cp "$DFLASH_AGENT_HOME"/state/speculation/acceptance/*.json benchmarks/cpu-first-2026-12-04/acceptance-first-seed-t0.json
# -> wall 0.0 s, exit 0
rm -rf "$DFLASH_AGENT_HOME/state/speculation/acceptance"
# -> wall 0.0 s, exit 0
agent backend bench --preset smollm2-135m-dflash --profiles baseline,ngram,dflash --prompts seed --temperatures 0.7 --max-tokens 256 --repeats 2 --json benchmarks/cpu-first-2026-12-04/first-seed-t0.7.json 2>&1 | tee benchmarks/cpu-first-2026-12-04/first-seed-t0.7.log
# -> wall 42.9 s, exit 0
cp "$DFLASH_AGENT_HOME"/state/speculation/acceptance/*.json benchmarks/cpu-first-2026-12-04/acceptance-first-seed-t0.7.json
# -> wall 0.0 s, exit 0
