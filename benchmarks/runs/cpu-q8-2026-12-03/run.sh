#!/bin/bash
# CPU benches of the product's smollm2-135m-dflash preset (target served as Q8_0) on a quiet box.
set -x
cd /work/main && . .venv/bin/activate
export DFLASH_AGENT_HOME=/tmp/testhome NO_COLOR=1 COLUMNS=100
O=/tmp/q8run
agent backend down --all
agent backend download smollm2-135m-dflash
agent backend calibrate --preset smollm2-135m-dflash --check-accept 0.9 --json $O/cal-q80-v4.json \
  || agent backend calibrate --preset smollm2-135m-dflash --check-accept 0.9 --json $O/cal-q80-v4.json
for p in 0.9 0.75; do
  agent backend bench --preset smollm2-135m-dflash --profiles baseline,dflash,dflash-fixed --prompts edit \
    --temperatures 0 --max-tokens 256 --repeats 3 --synth-accept $p --json $O/bench-q80-s$p.json
done
agent backend bench --preset smollm2-135m-dflash --profiles baseline,dflash --prompts edit \
  --temperatures 0 --max-tokens 256 --repeats 2 --json $O/bench-q80-v4-real.json
echo DONE
