"""The files a task names, viewed for the model before its first step.

A small model given "add an undo() method to the TextBuffer class in buffer.py" wrote the whole
file from its guess, without reading it; create refused (the file was never viewed), the model
sent the same call again and the task stopped on ``repeated_call`` (Qwen2.5-Coder-1.5B, issue
49). Aider and Claude Code put the files a user names (``/add``, ``@file``) in the context up
front; here each existing file the task names is viewed by the product, as if the model had
called ``view`` (the history reads like its own calls, and the tools then count the file as
seen), and a task naming none gets the listing of the root folder.
"""

from __future__ import annotations

import re

from tools.secretfiles import holds_secrets
from tools.workspace import PathRefused, Workspace

MAX_FILES = 4
"""Files viewed at most: a task naming more than this is a larger change the model plans."""
MAX_BYTES = 48 * 1024
"""Files larger than this are left for the model to page through (view shows 2000 lines)."""
_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]+)(?![\w/-])")
"""A file name with an extension, optionally with folders (``src/app.py``, ``buffer.py``)."""


def named_files(task: str, workspace: Workspace) -> list[str]:
    """Workspace-relative names of the regular files inside ``workspace`` that ``task`` names,
    in the order first named, at most :data:`MAX_FILES`, none over :data:`MAX_BYTES`. Names
    that resolve outside the workspace or to no file are left out, and so are files that may
    hold secrets (:func:`tools.secretfiles.holds_secrets`): reading one needs the user's
    approval, which a view the product makes would skip."""
    found: list[str] = []
    for match in _NAME.finditer(task):
        name = match.group(1).rstrip(".")
        try:
            full = workspace.resolve(name, writable=False)
        except PathRefused:
            continue
        if not full.is_file() or full.stat().st_size > MAX_BYTES \
                or holds_secrets(workspace, full) is not None:
            continue
        rel = full.relative_to(workspace.root).as_posix() \
            if workspace.root in full.parents else None
        if rel is not None and rel not in found:
            found.append(rel)
        if len(found) == MAX_FILES:
            break
    return found


def first_views(task: str, workspace: Workspace) -> list[tuple[str, dict[str, str]]]:
    """The ``view`` calls to make before the model's first step: each named file, or, when the
    task names none, the root folder."""
    return [("view", {"path": name}) for name in named_files(task, workspace) or ["."]]
