"""The files a task names, read for the model and put before the task in its message.

A small model given "add an undo() method to the TextBuffer class in buffer.py" wrote the whole
file from its guess, without reading it; create refused (the file was never viewed), the model
sent the same call again and the task stopped on ``repeated_call`` (Qwen2.5-Coder-1.5B, issue
49). Aider and Claude Code put the files a user names (``/add``, ``@file``) in the context up
front, the request after them. So does this: each existing file the task names is read with the
``view`` tool (so the edit tools count it as seen) and shown as it is, in a fence, before the
task's words; a task naming none gets the listing of the root folder. Not as calls the model
seems to have made: with one ``view`` call as the only example of its own turns, the model made
the same call again and again.

Under the ``whole`` protocol the model writes files whole and reads none by itself (it has no
``view``), so a small project is shown entire: every text file git would not ignore, when
they are few and short (:data:`SMALL_PROJECT_FILES`, :data:`SMALL_PROJECT_BYTES`), the named
ones first. A task such as "the tests in test_pagination.py fail; fix the code" names only
the test, and the code it needs is the file next to it.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools.ignore import walk
from tools.registry import Registry
from tools.secretfiles import holds_secrets
from tools.workspace import PathRefused, Workspace

MAX_FILES = 4
"""Files shown at most: a task naming more than this is a larger change the model plans."""
MAX_BYTES = 48 * 1024
"""Files larger than this are left for the model to page through."""
_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]+)(?![\w/-])")
"""A file name with an extension, optionally with folders (``src/app.py``, ``buffer.py``)."""
SMALL_PROJECT_FILES = 8
SMALL_PROJECT_BYTES = 32 * 1024
"""A project with at most this many text files, of at most this many bytes together, is shown
whole under the ``whole`` protocol (about 8,000 tokens at most)."""
FENCES = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript",
          ".json": "json", ".toml": "toml", ".md": "markdown", ".sh": "bash", ".go": "go",
          ".rs": "rust", ".java": "java", ".c": "c", ".h": "c", ".cpp": "cpp", ".yaml": "yaml",
          ".yml": "yaml", ".html": "html", ".css": "css"}


def named_files(task: str, workspace: Workspace) -> list[str]:
    """Workspace-relative names of the regular files inside ``workspace`` that ``task`` names,
    in the order first named, at most :data:`MAX_FILES`, none over :data:`MAX_BYTES`. Names
    that resolve outside the workspace or to no file are left out, and so are files that may
    hold secrets (:func:`tools.secretfiles.holds_secrets`): reading one needs the user's
    approval, which a read the product makes would skip."""
    found: list[str] = []
    for match in _NAME.finditer(task):
        name = match.group(1).rstrip(".")
        try:
            full = workspace.resolve(name, writable=False)
        except PathRefused:
            continue
        if workspace.root not in full.parents or not full.is_file() \
                or full.stat().st_size > MAX_BYTES or holds_secrets(workspace, full) is not None:
            continue
        rel = full.relative_to(workspace.root).as_posix()
        if rel not in found:
            found.append(rel)
        if len(found) == MAX_FILES:
            break
    return found


def small_project(workspace: Workspace) -> list[str] | None:
    """Workspace-relative names of every text file git would not ignore, sorted, when there
    are at most :data:`SMALL_PROJECT_FILES` of at most :data:`SMALL_PROJECT_BYTES` together
    (None: a larger project). Files that may hold secrets are left out, as in
    :func:`named_files`."""
    found, total = [], 0
    for path in walk(workspace.root, workspace.root):
        if not path.is_file() or path.is_symlink():
            continue
        if holds_secrets(workspace, path) is not None or not _is_text(path):
            continue
        total += path.stat().st_size
        found.append(path.relative_to(workspace.root).as_posix())
        if len(found) > SMALL_PROJECT_FILES or total > SMALL_PROJECT_BYTES:
            return None
    return sorted(found)


def _is_text(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def with_named_files(task: str, registry: Registry, workspace: Workspace,
                     whole_project: bool = False) -> str:
    """The task's message for the model: the files it names (read with ``view``, shown as
    they are), or the root folder's listing, then the task. With ``whole_project`` a small
    project (:func:`small_project`) is shown entire, the named files first. A file ``view``
    cannot show (not text) is left out."""
    parts = []
    names = named_files(task, workspace)
    if whole_project:
        names += [n for n in small_project(workspace) or [] if n not in names]
    for name in names:
        obs = registry.call("view", {"path": name})
        if obs.is_error:
            continue
        text = (workspace.root / name).read_text("utf-8", errors="replace")
        fence = "````" if "```" in text else "```"
        lang = FENCES.get("." + name.rsplit(".", 1)[-1].lower(), "") if "." in name else ""
        body = text if text.endswith("\n") or not text else text + "\n"
        parts.append(f"{name}\n{fence}{lang}\n{body}{fence}")
    if not parts:
        listing = registry.call("view", {"path": "."})
        if listing.is_error:
            return task
        return f"The project's files:\n{listing.text}\n\nThe task: {task}"
    return "\n\n".join(parts) + f"\n\nThe task: {task}"
