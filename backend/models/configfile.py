"""Reading a config file (``config.toml``, a repository's ``.agents/config.toml``,
``presets.toml``) without trusting what the path is.

A repository's config file arrives with ``git clone``, and git stores symlinks: a
``.agents/config.toml`` linking to ``/dev/zero`` made a plain ``read_text()`` grow to 23 GB until
the kernel killed it, and a FIFO there blocked ``open()`` forever. So a config file is read only
when it is a regular file (through a symlink is fine) of at most :data:`MAX_CONFIG_BYTES`, and
it is opened without blocking, then checked again on the open descriptor (the path may have been
swapped since the first look).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_CONFIG_BYTES = 2**20
"""A real config file is a few KB; a MiB leaves room for many presets and long comments."""

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class ConfigFileError(ValueError):
    """The file cannot be read as a config file; the message names it and says why."""


def _refuse_unless_regular(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise ConfigFileError(f"{path} is a directory, not a config file; remove or rename it")
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    target = f" (it links to {os.path.realpath(path)})" if path.is_symlink() else ""
    raise ConfigFileError(f"{path} is {kind}{target}, not a config file; remove it or make it "
                          "a plain file")


def read_config_text(path: Path) -> str:
    """The UTF-8 text of the config file at ``path``; raises :class:`ConfigFileError` naming the
    file when it is not a regular file, is over :data:`MAX_CONFIG_BYTES`, cannot be read or is
    not UTF-8. Only a regular file is ever read, and never past the cap."""
    try:
        _refuse_unless_regular(path, os.stat(path).st_mode)
        # O_NONBLOCK: a FIFO swapped in after the stat must not block the open.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(fd)
            _refuse_unless_regular(path, info.st_mode)
            # One byte past the cap: the file may have grown since fstat.
            data = file.read(MAX_CONFIG_BYTES + 1) if info.st_size <= MAX_CONFIG_BYTES else b""
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if max(info.st_size, len(data)) > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"{path} is larger than {MAX_CONFIG_BYTES:,} bytes, the most a "
                              "config file may be (a real one is a few KB): is it the right "
                              "file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path}: not UTF-8 text (byte {exc.start}); save it as "
                              "UTF-8") from exc
