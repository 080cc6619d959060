#!/usr/bin/env bash
# The README's first command from a fresh clone with a fresh HOME (nothing cached: pip, the
# engine, the model), then three more descriptions in the same clone and home (the engine build
# and the model fetch apart). Usage: fresh_first_command.sh REPO ROOT OUT.jsonl [COMMIT]
set -u
repo=$1 root=$2 out=$3 rev=${4:-HEAD}
rm -rf "$root" && mkdir -p "$root/home"
git clone -q "$repo" "$root/dflash-agent" && cd "$root/dflash-agent" && git checkout -q "$rev" || exit 2
export HOME=$root/home
commit=$(git rev-parse --short HEAD)
t0=$(date +%s.%N)
bash -c 'python3 -m venv .venv && . .venv/bin/activate && pip install . && cd .. && agent new-project "a CLI todo app with tests"' \
  > "$root/first.out" 2> "$root/first.err"
rc=$?
t1=$(date +%s.%N)
record() {  # description exit wall project stdout-file
  local tests
  tests=$(cd "$root/$4" 2>/dev/null && timeout 300 .venv/bin/python -m pytest -q 2>&1 | tail -1)
  python3 - "$1" "$2" "$3" "$4" "$5" "$tests" "$commit" >> "$out" <<'PY'
import json, sys
d, rc, wall, project, stdout, tests, commit = sys.argv[1:]
text = open(stdout).read()
print(json.dumps({"description": d, "commit": commit, "exit": int(rc), "wall_s": round(float(wall), 1),
                  "project": project, "pytest_by_hand": tests, "stdout_tail": text[-1500:]}))
PY
}
record "a CLI todo app with tests" $rc "$(echo "$t1 - $t0" | bc)" a-cli-todo-app-with-tests "$root/first.out"
cd "$root"
for d in "a python function that adds two numbers" "a word frequency counter CLI" \
         "a temperature converter between Celsius and Fahrenheit"; do
  slug=$("$root/dflash-agent/.venv/bin/python" -c \
    'import sys; from agent.newproject import slugify; print(slugify(sys.argv[1]))' "$d")
  t0=$(date +%s.%N)
  "$root/dflash-agent/.venv/bin/agent" new-project "$d" > "$root/$slug.out" 2> "$root/$slug.err"
  rc=$?
  t1=$(date +%s.%N)
  record "$d" $rc "$(echo "$t1 - $t0" | bc)" "$slug" "$root/$slug.out"
done
"$root/dflash-agent/.venv/bin/agent" backend down --all > /dev/null 2>&1
