#!/bin/bash
# view without line numbers: n-gram t/step on the forced agent turns (experiment, not the product)
cd /tmp/wt-nonum
export DFLASH_AGENT_HOME=/tmp/nonumhome
PY=/work/main/.venv/bin/python
for p in nn-6-2-16 nn-fixed; do
  echo "== $p $(date +%T)"
  prof=ngram; [[ $p == nn-fixed ]] && prof=ngram-fixed
  PYTHONPATH=/tmp/wt-nonum $PY benchmarks/agent_turns.py --preset nn --profiles $prof --protocols text --no-plain \
    --sessions vercheck-prereleases --forced --json /tmp/wt-nonum/$p.json -q > /tmp/wt-nonum/$p.txt 2>&1
  echo "rc=$? $(date +%T)"
done
