"""The ecosystems ``new-project`` can scaffold, and which of them this machine can build.

An ecosystem is what a plan's ``toolchain`` names: the executables it needs on PATH, what to
install when they are missing, the files that mark such a project (how its test runner is
found), what git should ignore (its isolated environment and build output) and the bundled
skill that carries its conventions.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass


@dataclass(frozen=True)
class Ecosystem:
    """One toolchain a plan may name."""

    name: str
    """The plan's ``toolchain`` value, e.g. ``python``."""
    language: str
    tools: tuple[tuple[str, ...], ...]
    """Executables needed on PATH: each group is satisfied by any one of its names."""
    install_hint: str
    """What to install when a tool is missing (said to the user)."""
    markers: tuple[str, ...]
    """Files at the project root that mark this kind of project (the test runner's cue)."""
    ignore: tuple[str, ...]
    """``.gitignore`` lines: the isolated environment and build output."""
    skill: str
    """The bundled skill with this ecosystem's conventions."""
    layout: str
    """What a developer of this ecosystem expects to find (for the model's task)."""


ECOSYSTEMS: dict[str, Ecosystem] = {e.name: e for e in (
    Ecosystem("python", "Python", (("python3", "python"),),
              "Python 3 with its venv module (e.g. the python3 and python3-venv packages)",
              ("pyproject.toml", "setup.py", "setup.cfg"),
              ("__pycache__/", "*.py[cod]", ".pytest_cache/", ".venv/", "*.egg-info/", "build/",
               "dist/"),
              "python-project",
              "pyproject.toml, a package (src/NAME/), tests/test_*.py (pytest), README.md"),
    Ecosystem("node", "JavaScript/TypeScript (Node.js)", (("node",), ("npm",)),
              "Node.js with npm (e.g. the nodejs and npm packages)",
              ("package.json",), ("node_modules/", "coverage/", "dist/"),
              "node-project",
              "package.json with a \"test\" script, src/, test/ (node --test), README.md"),
    Ecosystem("rust", "Rust", (("cargo",),), "Rust with cargo (rustup)",
              ("Cargo.toml",), ("target/",), "rust-project",
              "Cargo.toml, src/main.rs or src/lib.rs with #[cfg(test)] tests, tests/, "
              "README.md"),
    Ecosystem("go", "Go", (("go",),), "the Go toolchain (go)", ("go.mod",), ("bin/",),
              "go-project", "go.mod, package files with *_test.go beside them, README.md"),
    Ecosystem("java-maven", "Java (Maven)", (("javac",), ("mvn",)),
              "a JDK (javac) and Maven (mvn)", ("pom.xml",), ("target/",), "java-project",
              "pom.xml, src/main/java/..., src/test/java/... (JUnit), README.md"),
    Ecosystem("java-gradle", "Java (Gradle)", (("javac",), ("gradle",)),
              "a JDK (javac) and Gradle (gradle)",
              ("build.gradle", "build.gradle.kts", "settings.gradle", "settings.gradle.kts"),
              ("build/", ".gradle/"), "java-project",
              "build.gradle(.kts), src/main/java/..., src/test/java/... (JUnit), README.md"),
    Ecosystem("c-make", "C or C++ (make)",
              (("cc", "gcc", "clang", "c++", "g++", "clang++"), ("make",)),
              "a C/C++ compiler and make (e.g. the build-essential package)",
              ("Makefile", "makefile", "GNUmakefile"), ("*.o", "build/"), "c-project",
              "Makefile with a `test` target, src/, tests/, README.md"),
)}


def have(group: tuple[str, ...], path: str | None = None) -> str | None:
    """The first executable of ``group`` found on ``path`` (``os.pathsep``-separated; None:
    the process's PATH), as its full path; None when none is there."""
    for name in group:
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


def missing(ecosystem: Ecosystem, path: str | None = None) -> list[str]:
    """The tool groups of ``ecosystem`` not on ``path``, each written ``a or b``."""
    return [" or ".join(group) for group in ecosystem.tools if have(group, path) is None]


def available(path: str | None = None) -> dict[str, bool]:
    """Every ecosystem's name → whether all its tools are on ``path``."""
    return {name: not missing(eco, path) for name, eco in ECOSYSTEMS.items()}
