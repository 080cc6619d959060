"""``agent backend cache list|rm``: what the home holds (engines, models), its size on disk and
when each was last used by a server we started."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from backend.engine.registry import list_engines
from backend.errors import StatedError
from backend.home import home

USAGE_FILE = "usage.json"


class CacheError(StatedError, ValueError):
    """Unknown cache entry, or one a running server still uses."""

    plain = True


@dataclass
class CacheEntry:
    """One engine or model in the cache."""

    kind: str
    """``engine`` or ``model``."""
    name: str
    path: Path
    size_bytes: int
    last_used: float | None
    """Unix time a server we started last used it, or None."""


def _usage_path() -> Path:
    return home().ensure().cache / USAGE_FILE


def _usage() -> dict[str, float]:
    try:
        data = json.loads(_usage_path().read_text("utf-8"))
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, AttributeError):
        return {}


def record_use(*paths: Path) -> None:
    """Remember that ``paths`` (engine binaries, model files) were used now."""
    usage = _usage()
    now = time.time()
    for path in paths:
        usage[str(Path(path).resolve())] = now
    tmp = _usage_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(usage, indent=1), "utf-8")
    tmp.replace(_usage_path())


def _size(path: Path) -> int:
    if path.is_file():
        return path.resolve().stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def list_cache() -> list[CacheEntry]:
    """Engines first (newest first), then models by name."""
    usage = _usage()
    entries = [CacheEntry("engine", e.key, e.binary.parent.parent,
                          _size(e.binary.parent.parent) if e.engine != "system" else 0,
                          usage.get(str(e.binary.resolve())))
               for e in list_engines()]
    models = sorted(p for p in home().models.rglob("*.gguf") if p.is_file())
    for path in models:
        entries.append(CacheEntry("model", path.name, path, _size(path),
                                  usage.get(str(path.resolve()))))
    return entries


def remove(name: str, in_use: set[Path] | None = None) -> CacheEntry:
    """Delete the engine or model called ``name`` (an engine key or a model file name).

    ``in_use``: resolved paths running servers use; such an entry is refused. Raises
    :class:`CacheError`.
    """
    matches = [e for e in list_cache() if e.name == name]
    if not matches:
        known = ", ".join(e.name for e in list_cache()) or "nothing"
        raise CacheError(f"nothing called '{name}' in the cache (it holds: {known})")
    if len(matches) > 1:
        raise CacheError(f"'{name}' names {len(matches)} entries; remove the files by hand: "
                         + ", ".join(str(e.path) for e in matches))
    entry = matches[0]
    busy = in_use or set()
    if entry.path.resolve() in busy or any(entry.path.resolve() in p.parents for p in busy):
        raise CacheError(f"{name} is used by a running server; stop it first "
                         "(`agent backend down --all`)")
    if entry.kind == "engine":
        if entry.path.resolve().parent != home().engines.resolve():
            raise CacheError(f"{name} is a registered system binary; nothing of it is cached")
        shutil.rmtree(entry.path)
    else:
        target = entry.path.resolve()
        entry.path.unlink()
        if target != entry.path and target.is_file():
            target.unlink()  # the blob behind a hub-cache symlink
        for side in (entry.path.with_name(entry.path.name + ".size"),):
            side.unlink(missing_ok=True)
    return entry
