"""The one llama-server that capture.py and check_combo.py each start: started with ``argv``,
its output in ``log``, waited for on /health, stopped on leaving; ``post`` sends it JSON."""
import contextlib
import json
import subprocess
import time
import urllib.request


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


@contextlib.contextmanager
def served(argv, url, log_path):
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(300):
                try:
                    urllib.request.urlopen(url + "/health", timeout=2)
                    break
                except Exception:
                    time.sleep(1)
            yield proc
        finally:
            proc.terminate()
            proc.wait()
