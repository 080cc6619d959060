"""new-project with a preset, for several descriptions: exit code, tests, wall time, tok/s.

python new_project_runs.py PRESET OUT.jsonl WORKDIR [AGENT [FLAG ...]]

FLAGs go to every new-project command (e.g. --tool-protocol whole)."""
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

preset, out, root = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
agent = sys.argv[4] if len(sys.argv) > 4 else "agent"
flags = sys.argv[5:]
descs = ["a CLI todo app with tests", "a python function that adds two numbers",
         "a word frequency counter CLI", "a temperature converter between Celsius and Fahrenheit"]
shutil.rmtree(root, ignore_errors=True)
root.mkdir(parents=True)
for d in descs:
    t0 = time.monotonic()
    p = subprocess.run([agent, "new-project", d, "--preset", preset, "--json", *flags], cwd=root,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    try:
        summary = json.loads(p.stdout.strip().splitlines()[-1])
    except Exception:
        summary = {"raw": p.stdout[-500:]}
    rec = {"description": d, "flags": flags, "exit": p.returncode, "wall_s": round(wall, 1),
           "summary": summary, "stderr_tail": p.stderr[-600:]}
    with out.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    print(d, p.returncode, summary.get("tests"), round(wall), flush=True)
