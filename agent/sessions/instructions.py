"""Project instructions: ``AGENTS.md`` files from the repository root down to the working
directory, in that order, size-capped, for the system prompt."""

from __future__ import annotations

from pathlib import Path

MAX_FILE_CHARS = 8_000
MAX_TOTAL_CHARS = 16_000


def find_agents_md(root: Path, cwd: Path) -> list[Path]:
    """``AGENTS.md`` files in ``root`` and each folder down to ``cwd`` (root first)."""
    root, cwd = root.resolve(), cwd.resolve()
    if cwd != root and root not in cwd.parents:
        cwd = root
    folders = [root] + [root / p for p in _steps(cwd.relative_to(root))]
    return [f / "AGENTS.md" for f in folders if (f / "AGENTS.md").is_file()]


def _steps(rel: Path) -> list[Path]:
    parts = rel.parts
    return [Path(*parts[: i + 1]) for i in range(len(parts))]


def load_instructions(root: Path, cwd: Path) -> str:
    """The instructions text (empty when there are none); each file is capped at
    :data:`MAX_FILE_CHARS` and the whole at :data:`MAX_TOTAL_CHARS` characters."""
    parts: list[str] = []
    total = 0
    for path in find_agents_md(root, cwd):
        text = path.read_text("utf-8", errors="replace").strip()
        if len(text) > MAX_FILE_CHARS:
            text = text[:MAX_FILE_CHARS] + f"\n[... truncated: {path.name} is longer]"
        rel = path.relative_to(root.resolve())
        block = f"## {rel}\n{text}"
        if total + len(block) > MAX_TOTAL_CHARS:
            parts.append(f"[further AGENTS.md files omitted: over {MAX_TOTAL_CHARS} characters]")
            break
        parts.append(block)
        total += len(block)
    return "\n\n".join(parts)
