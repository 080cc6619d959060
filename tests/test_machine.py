"""The machine's facts come from one module: ``nvidia-smi`` is run by ``backend/machine.py``
alone, asked once and kept (free memory asked afresh on request), an old driver without
``compute_cap`` still answers, and the CPU's features are read once per cpuinfo file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from backend import machine
from tests.fake_tools import fake_nvidia_smi, gpu_line

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("agent", "backend", "tools", "skills", "benchmarks", "train")


def smi_callers(root: Path) -> list[str]:
    """Files outside ``backend/machine.py`` that pass ``nvidia-smi`` or a ``--query-gpu``
    option to a call (``shutil.which``, ``subprocess.run``, an argv list)."""
    found = []
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == "backend/machine.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if not isinstance(node, ast.Call):
                    continue
                for arg in ast.walk(node):
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and (
                            arg.value == "nvidia-smi" or arg.value.startswith("--query-gpu")):
                        found.append(rel)
    return sorted(set(found))


def test_nvidia_smi_is_run_from_the_machine_module_only() -> None:
    assert smi_callers(ROOT) == []


def test_a_stray_nvidia_smi_call_is_found(tmp_path: Path) -> None:
    for rel, text in {"backend/machine.py": 'import shutil\nshutil.which("nvidia-smi")\n',
                      "backend/serve/fit.py": 'import subprocess\n'
                                              'subprocess.run(["nvidia-smi", "-L"])\n',
                      "agent/x.py": 'run(["smi", "--query-gpu=name"])\n',
                      "tools/y.py": 'print("nvidia-smi failed")\n'}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert smi_callers(tmp_path) == ["agent/x.py", "backend/serve/fit.py"]


def _counting_smi(bin_dir: Path, stdout: str, refuse_compute_cap: bool = False) -> Path:
    """An nvidia-smi that appends its arguments to ``calls`` beside it; with
    ``refuse_compute_cap`` it fails as a driver before 510 does when asked for that field."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    refuse = ('case "$*" in *compute_cap*) echo \'Field "compute_cap" is not a valid field to '
              'query.\'; exit 2;; esac\n') if refuse_compute_cap else ""
    script.write_text(f'#!/bin/sh\necho "$*" >> {bin_dir / "calls"}\n{refuse}'
                      f"printf '%s\\n' '{stdout}'\n")
    script.chmod(0o755)
    return bin_dir


def test_gpus_are_asked_once_and_again_when_fresh(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _counting_smi(tmp_path / "bin", gpu_line(name="NVIDIA H200", total=143771))
    monkeypatch.setenv("PATH", str(bin_dir))
    [gpu] = machine.gpus() or ()
    assert (gpu.name, gpu.total_mib, gpu.free_mib, gpu.compute_cap) == \
        ("NVIDIA H200", 143771, 23800, "8.9")
    assert machine.gpu_names() == ["NVIDIA H200, 143771 MiB"]
    assert len((bin_dir / "calls").read_text().splitlines()) == 1
    machine.gpus(fresh=True)
    assert len((bin_dir / "calls").read_text().splitlines()) == 2


def test_a_driver_without_compute_cap_still_answers(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    line = gpu_line().rsplit(", ", 1)[0]
    monkeypatch.setenv("PATH", str(_counting_smi(tmp_path / "bin", line, True)))
    [gpu] = machine.gpus() or ()
    assert (gpu.total_mib, gpu.free_mib, gpu.compute_cap) == (24564, 23800, "")


def test_no_nvidia_smi_and_a_failing_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert machine.gpus() is None and machine.gpu_names() == []
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "bin", "", 9, "driver gone")))
    with pytest.raises(machine.GpuQueryError, match=r"failed \(exit 9\): driver gone") as err:
        machine.gpus()
    assert err.value.reason == "exit" and machine.gpu_names() == []


def test_cpu_features_are_read_once_per_file(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu AVX2\n")
    assert machine.cpu_features(cpuinfo) == {"fpu", "avx2"}
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu\n")
    assert machine.cpu_features(cpuinfo) == {"fpu", "avx2"}
    assert machine.cpu_features(tmp_path / "missing") == frozenset()
