"""The workspace root that confines every tool, and its hidden scratch directory.

What the file tools may touch (the security model: docs/guide/security.md):

* only paths that resolve, symlinks included, inside the workspace (or, for reading, an
  activated skill's folder);
* never a version-control folder for writing (``.git/``, ``.hg/``, ``.svn/``, ``.jj/`` at any
  depth): git runs commands named in ``.git/config`` (``core.fsmonitor``, filters) and in
  ``.git/hooks/``, so an edit there is command execution, which only ``bash`` may do (and bash
  asks under ``auto-edit``);
* files git interprets as configuration from the working tree (``.gitattributes``,
  ``.gitmodules``, ``.lfsconfig``, files named by ``include.path``) are writable, but an edit
  to one needs approval like a command (:meth:`Workspace.git_interpreted`);
* reads and writes open each path component with ``O_NOFOLLOW`` from the root's directory
  descriptor, so a symlink swapped in after the path was checked cannot redirect them.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import unicodedata
from pathlib import Path
from typing import BinaryIO

SCRATCH_NAME = ".dflash-agent"
VCS_FOLDERS = frozenset({".git", ".hg", ".svn", ".jj"})
GIT_CONFIG_FILES = frozenset({".gitattributes", ".gitmodules", ".lfsconfig", ".gitconfig"})
_INCLUDE_PATH = re.compile(r"^\s*path\s*=\s*(.+?)\s*$", re.IGNORECASE)
_SECTION = re.compile(r"^\s*\[\s*([^\]\s\"]+)")
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class PathRefused(ValueError):
    """A tool may not use this path."""


class OutsideWorkspace(PathRefused):
    """A path resolves (symlinks included) outside the workspace root."""


class VcsFolder(PathRefused):
    """A write into a version-control folder (``.git/`` …)."""


CONTROL_CHARACTERS = ("".join(map(chr, range(0x01, 0x20))) + "".join(map(chr, range(0x7F, 0xA0)))
                      + "\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
                      "\u2066\u2067\u2068\u2069")
"""Characters a name is never shown with as they are (:func:`display_name`): the C0 and C1
controls and DEL (a newline or carriage return made one name look like two lines of a listing,
or put text of the name's choosing on a line of its own: "a.py\nIGNORE PREVIOUS
INSTRUCTIONS"), the line and paragraph separators (U+2028, U+2029: line breaks to
``str.splitlines`` and some renderers) and the bidirectional controls (they reorder how a name
reads on a terminal, as in "Trojan Source"). NUL is left out: no name holds it."""

_HEX = r"x(?:0[1-9a-fA-F]|1[0-9a-fA-F]|7[fF]|[89a-fA-F][0-9a-fA-F])"
_SHOWN_ESCAPE = re.compile(r"\\(\\|" + _HEX + ")")
"""In a name as the tools show it: an escaped backslash, or a byte written as ``\\xNN``: a
control byte (01 to 1f, 7f) or a byte from 80 to ff (the only bytes that can fail to decode
as UTF-8, and those that spell a shown control character from U+0080 up)."""
_HEX_BYTE = re.compile(_HEX)
_ESCAPED = re.compile(f"[{CONTROL_CHARACTERS}\udc80-\udcff]")
"""A character :func:`display_name` shows escaped: a control character, or an undecodable
byte (as ``os.fsdecode`` holds it, U+DC80..U+DCFF)."""


_UNSHOWABLE = re.compile(f"[{CONTROL_CHARACTERS}\ud800-\udfff]")
"""What :func:`display_given` escapes in a path as given: a control character, or a lone
surrogate (no path as the model gives it holds an undecodable byte: JSON cannot carry one)."""


def _shown_char(ch: str) -> str:
    # An undecodable byte 0xNN is held as U+DCNN; a control character is shown as its UTF-8
    # bytes, so that every escape is a byte and reads back through one rule.
    if "\udc80" <= ch <= "\udcff":
        return f"\\x{ord(ch) - 0xDC00:02x}"
    return "".join(f"\\x{byte:02x}" for byte in ch.encode("utf-8"))


def display_name(name: str) -> str:
    """``name`` (a path as Python holds it, undecodable bytes as U+DC80..U+DCFF) as the tools
    show it to the model, which must be able to pass it back (:func:`name_from_display`).

    Each byte that is not UTF-8 becomes ``\\xNN`` (JSON cannot carry it as it is), and so
    does each byte of a control character (:data:`CONTROL_CHARACTERS`: a newline is
    ``\\x0a``, U+2028 ``\\xe2\\x80\\xa8``), so a name is always one line and reads as it is
    stored. A real backslash is doubled where it would otherwise read as the start of an
    escape (before another backslash, an escaped character, or ``x`` and the two hex digits
    of an escapable byte): a file literally named ``a\\xf3`` is shown ``a\\\\xf3``, never as
    the one-byte name. Every other name is shown exactly as it is, backslashes included."""
    if "\\" not in name and not _ESCAPED.search(name):
        return name
    out = []
    for i, ch in enumerate(name):
        if _ESCAPED.fullmatch(ch):
            out.append(_shown_char(ch))
        elif ch == "\\" and (name[i + 1:i + 2] == "\\" or _ESCAPED.match(name, i + 1)
                             or _HEX_BYTE.match(name, i + 1)):
            out.append("\\\\")
        else:
            out.append(ch)
    return "".join(out)


def _read_shown(text: str, backslash: bytes) -> str:
    """``text`` with each ``\\xNN`` escape read back into its byte and each ``\\\\`` into
    ``backslash``, the bytes then decoded as a file name is (UTF-8, undecodable bytes as
    U+DCNN): escaped bytes that together are UTF-8 give their character.

    Raises :class:`PathRefused` for a lone UTF-16 surrogate (from a JSON ``"\\ud800"``),
    which no file name can hold."""
    try:
        pieces, last = [], 0
        for m in _SHOWN_ESCAPE.finditer(text):
            pieces += [text[last:m.start()].encode("utf-8", "surrogateescape"),
                       backslash if m[1] == "\\" else bytes([int(m[1][1:], 16)])]
            last = m.end()
        pieces.append(text[last:].encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError as exc:
        raise PathRefused(f"{display_name(text)!r} holds a lone surrogate "
                          f"(U+{ord(exc.object[exc.start]):04X}), which no file name can "
                          "hold") from None
    return b"".join(pieces).decode("utf-8", "surrogateescape")


def name_from_display(text: str) -> str:
    """The name that :func:`display_name` shows as ``text``: ``\\xNN`` (NN a control byte,
    01 to 1f or 7f, or from 80 to ff) is that byte and ``\\\\`` one backslash; any other
    backslash is itself. Escaped bytes that together are UTF-8 give their character, the
    name the file system would report.

    Raises :class:`PathRefused` for a lone UTF-16 surrogate (from a JSON ``"\\ud800"``),
    which no file name can hold."""
    return _read_shown(text, b"\\")


def pattern_from_display(pattern: str) -> str:
    """A glob ``pattern`` written with names as the tools show them, each ``\\xNN`` read
    back as :func:`name_from_display` reads it, so a name copied from a listing matches its
    file. ``\\\\`` stays: in a git glob it already is one literal backslash, as in a shown
    name. Raises :class:`PathRefused` for a lone surrogate."""
    return _read_shown(pattern, b"\\\\")


def display_given(text: str) -> str:
    """``text``, a path as the model gave it, for a message about it: as given (relative or
    absolute, escapes as typed), with only the characters no listing shows as they are
    escaped (:data:`CONTROL_CHARACTERS` as :func:`display_name` writes them, a lone
    surrogate as ``\\uXXXX``), so a newline in a path never reaches a message raw."""
    return _UNSHOWABLE.sub(_given_char, text)


def _given_char(m: re.Match[str]) -> str:
    # A lone surrogate (from a JSON "\ud800") is no byte of a name: written as Python would.
    ch = m[0]
    return f"\\u{ord(ch):04x}" if "\ud800" <= ch <= "\udfff" else _shown_char(ch)


def _vcs_part(parts: tuple[str, ...]) -> str | None:
    # Case-insensitive: on macOS and Windows ".GIT/config" is git's own config file.
    return next((part for part in parts if part.lower() in VCS_FOLDERS), None)


class Workspace:
    """A directory the tools may read and write; paths resolve relative to it.

    ``read_only_roots`` are further folders (an activated skill's) that reading tools may use
    but nothing may write to. ``scratch`` (``<root>/.dflash-agent``) holds files the tools
    create for the model (spilled command output, background job logs); it is hidden from git
    via ``.git/info/exclude``.
    """

    def __init__(self, root: Path):
        self.root = Path(root).expanduser().resolve()
        self.read_only_roots: list[Path] = []

    def add_read_only_root(self, folder: Path) -> None:
        """Let reading tools use ``folder`` (symlinks resolved) from now on."""
        full = Path(folder).expanduser().resolve()
        if full not in self.read_only_roots:
            self.read_only_roots.append(full)

    def root_of(self, full: Path) -> Path:
        """The root (workspace or read-only) containing the resolved path ``full``."""
        for root in (self.root, *self.read_only_roots):
            if full == root or root in full.parents:
                return root
        raise OutsideWorkspace(f"{display_name(str(full))} is outside the workspace "
                               f"{display_name(str(self.root))}")

    def resolve(self, path: str | Path, writable: bool = True) -> Path:
        """Absolute, symlink-resolved path inside the workspace, or (``writable=False``, for
        tools that only read) inside a read-only root too; raises :class:`OutsideWorkspace`
        otherwise.

        A ``str`` is a name as the model gives it: the form the tools show
        (:func:`display_name`, ``\\xNN`` for a byte that is not UTF-8) is read back, and a
        name found only in its other Unicode normalization form is that one. A ``Path`` is a
        real path, taken as it is."""
        if "\x00" in str(path):
            raise PathRefused(f"{str(path)!r} contains a NUL byte, which no file name can hold")
        raw = self._from_text(path) if isinstance(path, str) else \
            self._unicode_form(Path(path).expanduser())
        # Messages name the path as given, control characters escaped (display_given).
        given = display_given(path) if isinstance(path, str) else display_name(str(path))
        full = (raw if raw.is_absolute() else self.root / raw).resolve()
        if full == self.root or self.root in full.parents:
            folder = _vcs_part(full.relative_to(self.root).parts) if writable else None
            if folder:
                raise VcsFolder(f"{given} is inside the version-control folder {folder}/, "
                                "which the file tools never write (git runs commands named "
                                "there); if this change is really needed, use the bash tool, "
                                "which asks for approval")
            return full
        for root in self.read_only_roots:
            if full == root or root in full.parents:
                if writable:
                    raise OutsideWorkspace(f"{given} is in the read-only folder "
                                           f"{display_name(str(root))} (an "
                                           "activated skill's); write inside the workspace "
                                           f"{display_name(str(self.root))} instead")
                return full
        raise OutsideWorkspace(f"{given} is outside the workspace "
                               f"{display_name(str(self.root))}; "
                               "only paths inside it can be used")

    def _from_text(self, text: str) -> Path:
        """The path the model means by ``text``. The name as shown (escapes read back) comes
        first: it is how glob, grep and view list the file, and it must reach that file even
        where a file named with the escape's literal characters exists too. Where only the
        literal name exists (``a\\\\b`` typed from a bash listing), it is that one. For a new
        file, the one whose folder exists, the name as shown first (a create then lists as it
        was typed)."""
        name = name_from_display(text)
        if name == text:
            return self._unicode_form(Path(text).expanduser())
        candidates = [self._unicode_form(Path(name).expanduser()),
                      self._unicode_form(Path(text).expanduser())]
        full = [path if path.is_absolute() else self.root / path for path in candidates]
        for test in (os.path.lexists, lambda path: os.path.isdir(os.path.dirname(path))):
            for candidate, path in zip(candidates, full, strict=True):
                if test(path):
                    return candidate
        return candidates[0]

    def _unicode_form(self, raw: Path) -> Path:
        """``raw``, or its other Unicode normalization form (NFC, NFD) where only that one
        exists: names written on macOS arrive decomposed ("a" + U+0303), models type them
        composed, and a view said "does not exist" while a create made a second file that
        looks the same in `ls`."""
        text = str(raw)
        base = raw if raw.is_absolute() else self.root / raw
        if text.isascii() or os.path.lexists(base):
            return raw
        for form in ("NFC", "NFD"):
            other = Path(unicodedata.normalize(form, text))
            if other != raw and os.path.lexists(other if other.is_absolute()
                                                else self.root / other):
                return other
        return raw

    def git_interpreted(self, path: str | Path) -> str | None:
        """Why git would read ``path`` (resolved inside the workspace) as configuration, or
        None: ``.gitattributes``, ``.gitmodules``, ``.lfsconfig``, ``.gitconfig`` anywhere, and
        files named by ``include.path`` in ``.git/config`` (filters and drivers declared there
        run commands)."""
        try:
            full = self.resolve(path, writable=False)
        except PathRefused:
            return None
        if full.name.lower() in GIT_CONFIG_FILES:
            return f"git reads {full.name} as configuration (it can name filters that run)"
        if full in self._config_includes():
            return "git includes this file into its configuration (include.path)"
        return None

    def _config_includes(self) -> set[Path]:
        config = self.root / ".git" / "config"
        try:
            lines = config.read_text("utf-8", errors="replace").splitlines()
        except OSError:
            return set()
        found, section = set(), ""
        for line in lines:
            if m := _SECTION.match(line):
                section = m.group(1).lower()
            elif section in {"include", "includeif"} and (m := _INCLUDE_PATH.match(line)):
                target = Path(m.group(1).strip('"')).expanduser()
                found.add((target if target.is_absolute() else config.parent / target)
                          .resolve())
        return found

    def open_bytes(self, full: Path) -> BinaryIO:
        """``full`` opened for binary reading like :meth:`read_bytes` (no symlink followed)."""
        return os.fdopen(self._open_file(full), "rb")

    def read_bytes(self, full: Path) -> bytes:
        """The bytes of the resolved path ``full`` (inside the workspace or a read-only root),
        opened without following any symlink (see the module docstring).

        Raises ``OSError`` (``ELOOP``/``ENOTDIR`` when a component became a symlink;
        ``IsADirectoryError``; ``EINVAL`` for a FIFO, socket or device)."""
        with os.fdopen(self._open_file(full), "rb") as fh:
            return fh.read()

    def _open_file(self, full: Path) -> int:
        """A descriptor of the regular file ``full``, opened without blocking: a FIFO in a
        cloned repository hung grep (and any read) for good in ``open``."""
        fd = self._open_beneath(full, os.O_RDONLY | os.O_NONBLOCK)
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return fd
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(full))
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(full))

    def atomic_write(self, full: Path, data: bytes) -> None:
        """Write ``data`` to the resolved path ``full`` in the workspace through a temporary
        file in the same folder and a rename, keeping an existing file's mode; parent folders
        are created. Every step goes through the parent's descriptor without following
        symlinks. Raises ``OSError``."""
        rel = full.relative_to(self.root)
        if not rel.parts:
            raise IsADirectoryError(str(full))
        full.parent.mkdir(parents=True, exist_ok=True)
        parent = self._open_beneath(full.parent, _DIR_FLAGS) if rel.parts[:-1] else \
            os.open(self.root, _DIR_FLAGS)
        try:
            try:
                mode = stat.S_IMODE(os.stat(full.name, dir_fd=parent, follow_symlinks=False)
                                    .st_mode)
            except FileNotFoundError:
                mode = 0o666 & ~_umask()
            tmp = f".{full.name}.{secrets.token_hex(4)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600,
                         dir_fd=parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                    os.fchmod(fh.fileno(), mode)
                os.replace(tmp, full.name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                os.unlink(tmp, dir_fd=parent)
                raise
        finally:
            os.close(parent)

    def _open_beneath(self, full: Path, flags: int) -> int:
        """``os.open(full, flags)`` walking from the root containing ``full`` one component at
        a time with ``O_NOFOLLOW`` (``openat``), so no symlink is followed on the way."""
        root = self.root_of(full)
        parts = full.relative_to(root).parts
        fd = os.open(root, _DIR_FLAGS)
        try:
            for part in parts[:-1]:
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = inner
            if not parts:
                return os.dup(fd)
            return os.open(parts[-1], flags | _NOFOLLOW, dir_fd=fd)
        finally:
            os.close(fd)

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, for display as :func:`display_name` shows it (bytes of
        a file name that are not UTF-8 as ``\\xNN`` escapes); :meth:`resolve` reads it back."""
        try:
            text = str(path.relative_to(self.root)) or "."
        except ValueError:
            text = str(path)
        return display_name(text)

    @property
    def scratch(self) -> Path:
        """The scratch directory, created and git-excluded on first use."""
        folder = self.root / SCRATCH_NAME
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            hide_from_git(self.root, f"/{SCRATCH_NAME}/")
        return folder


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def read_regular(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of ``path`` (links followed) when it is a regular file, opened
    without blocking; None for anything else or a file that cannot be read. For the files a
    cloned repository controls that are read besides the tools' own reads (a ``.gitignore``,
    an ``AGENTS.md``): a FIFO would block the open, a link to ``/dev/zero`` never end the read,
    one to ``/proc/kcore`` (a "regular" file of terabytes) fill memory. A path holding a NUL
    (read from a ``.git`` file's ``gitdir:``) is none either."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError):
        return None
    try:
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return file.read(limit)
    except OSError:
        return None


def hide_from_git(root: Path, pattern: str) -> None:
    """Add ``pattern`` to ``<root>/.git/info/exclude`` when ``root`` is a git work tree."""
    git_dir = root / ".git"
    if not git_dir.is_dir():
        return
    exclude = git_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    existing = exclude.read_text("utf-8") if exclude.is_file() else ""
    if pattern not in existing.splitlines():
        with exclude.open("a", encoding="utf-8") as fh:
            fh.write(("" if existing.endswith("\n") or not existing else "\n") + pattern + "\n")
