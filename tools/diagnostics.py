"""What is wrong with a file right after an edit, told in the edit's result.

Peers show a language server's diagnostics after each edit (OpenCode, Claude Code's IDE
integration); a small model otherwise learns of its broken file only when a test fails, or
never: Qwen2.5-Coder-1.5B wrapped every function of numtools.py in stray triple quotes, did not
run anything, and said the edge cases were fixed (issue 49). Python is checked with its own
compiler (no program runs: ``compile`` only parses), JSON with the json module; other files
are not checked.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

MAX_BYTES = 2 * 1024 * 1024
"""Files larger than this are not checked (generated or data files)."""


def problem(path: Path) -> str | None:
    """One line saying why the file at ``path`` does not parse (``SyntaxError at line 3: ...``),
    or None: it parses, is not a Python or JSON file, is too large, or cannot be read."""
    suffix = path.suffix.lower()
    if suffix not in {".py", ".json"}:
        return None
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if suffix == ".json":
        try:
            json.loads(data.decode("utf-8-sig"))
        except UnicodeDecodeError:
            return None
        except ValueError as exc:
            return f"not valid JSON: {exc}"
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for odd escapes is not an error
            compile(data, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno else ""
        text = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        return f"{type(exc).__name__}{where}: {exc.msg}{text}"
    except ValueError as exc:  # a NUL byte in the source
        return f"not Python source: {exc}"
    return None


def note(path: Path, shown: str) -> str:
    """The line an edit's result ends with when the edited file ``path`` (named ``shown``)
    does not parse, else ``""``."""
    found = problem(path)
    return f"\n[problem: {shown} does not parse: {found}]" if found else ""
