"""The ``gguf`` lower bound in ``pyproject.toml`` has what the product calls: the oldest version
it allows is fetched with pip (the wheel only, unpacked, never installed) and its sources are
checked for the two APIs the converters and the requantizer use. gguf 0.10-0.16 lack
``GGUFWriter.add_key_value(..., sub_type=)`` (backend/models/convert.py, requant.py), so a user
with one of them installed got a TypeError (exit 4) from `convert-draft` or a `requantize`
preset; the bound said 0.10."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lower_bound() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["dependencies"]
    spec = next(d for d in deps if re.match(r"gguf\b", d))
    found = re.search(r">=\s*([0-9.]+)", spec)
    assert found, f"gguf has no lower bound in pyproject.toml: {spec!r}"
    return found.group(1)


def test_the_oldest_gguf_allowed_has_the_apis_the_product_calls(tmp_path: Path):
    version = _lower_bound()
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                           "--only-binary", ":all:", "--disable-pip-version-check",
                           f"gguf=={version}", "-d", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    wheel = next(tmp_path.glob("gguf-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        writer = zf.read("gguf/gguf_writer.py").decode()
        reader = zf.read("gguf/gguf_reader.py").decode()
        quants = zf.read("gguf/quants.py").decode()
    assert re.search(r"def add_key_value\([^)]*sub_type", writer), \
        f"gguf {version}: GGUFWriter.add_key_value takes no sub_type"
    assert "def contents(" in reader, f"gguf {version}: ReaderField has no contents()"
    for name in ("def quantize(", "def dequantize(", "class Q4_1(", "class Q8_0("):
        assert name in quants, f"gguf {version}: quants.py lacks {name}"
