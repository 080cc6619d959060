"""Project instructions: ``AGENTS.md`` files from the repository root down to the working
directory, in that order, size-capped, for the system prompt."""

from __future__ import annotations

from pathlib import Path

from tools.workspace import read_regular

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


def _read_inside(path: Path, root: Path) -> tuple[str, bool] | None:
    """(text, cut short) of ``path`` when it resolves to a regular file inside ``root``, read
    without blocking and never past what :data:`MAX_FILE_CHARS` can use; None otherwise.

    A cloned repository controls its AGENTS.md: as a link to ``~/.ssh/id_rsa`` it put a file
    from outside the repository into the model's prompt, to ``/dev/zero`` or a FIFO it would
    have been read for ever. A link to another file of the repository still works."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # gone, or a symlink loop
        return None
    if root not in real.parents:
        return None
    data = read_regular(real, _MAX_BYTES + 1)
    if data is None:
        return None
    return data[:_MAX_BYTES].decode("utf-8", errors="replace"), len(data) > _MAX_BYTES


_MAX_BYTES = MAX_FILE_CHARS * 4
"""Bytes read of one AGENTS.md: enough for :data:`MAX_FILE_CHARS` characters of UTF-8."""


def load_instructions(root: Path, cwd: Path) -> str:
    """The instructions text (empty when there are none); each file is capped at
    :data:`MAX_FILE_CHARS` and the whole at :data:`MAX_TOTAL_CHARS` characters."""
    parts: list[str] = []
    total = 0
    for path in find_agents_md(root, cwd):
        rel = path.relative_to(root.resolve())
        read = _read_inside(path, root.resolve())
        if read is None:
            parts.append(f"[{rel} skipped: it is not a file inside the repository]")
            continue
        text, cut = read
        text = text.strip()
        if cut or len(text) > MAX_FILE_CHARS:
            text = text[:MAX_FILE_CHARS] + f"\n[... truncated: {path.name} is longer]"
        block = f"## {rel}\n{text}"
        if total + len(block) > MAX_TOTAL_CHARS:
            parts.append(f"[further AGENTS.md files omitted: over {MAX_TOTAL_CHARS} characters]")
            break
        parts.append(block)
        total += len(block)
    return "\n\n".join(parts)
