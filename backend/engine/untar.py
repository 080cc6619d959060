"""Unpacking a tar archive with the safety of tarfile's ``data`` filter: the filter itself where
this Python has it (3.12, 3.11.4 and later), the same checks by hand where it does not (Debian
12's system Python is 3.11.2, whose ``extractall`` takes no ``filter`` and raised TypeError)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path


class UnsafeMember(ValueError):
    """A member the ``data`` filter refuses: a path leaving the destination, a link pointing
    out of it (or to an absolute path), a device or a FIFO."""


def extract_data(tar: tarfile.TarFile, dest: Path) -> None:
    """Extract every member of ``tar`` under ``dest`` as ``tar.extractall(dest,
    filter="data")`` does (sources: Python's ``tarfile.data_filter``, PEP 706).

    Raises :class:`UnsafeMember` for a member that filter refuses (nothing is extracted when the
    check is by hand: every member is checked first), and what ``extractall`` raises otherwise
    (``tarfile.TarError``, ``OSError``)."""
    if hasattr(tarfile, "data_filter"):
        try:
            tar.extractall(dest, filter="data")
        except tarfile.FilterError as exc:
            raise UnsafeMember(str(exc)) from exc
        return
    root = os.path.realpath(dest)
    members = tar.getmembers()
    for member in members:
        _check(member, root)
        # as the data filter does: no setuid/setgid/sticky bits, no group/other write
        member.mode = member.mode & 0o755 if member.mode is not None else None
    tar.extractall(dest, members=members)


def _inside(root: str, path: str) -> bool:
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def _check(member: tarfile.TarInfo, root: str) -> None:
    # as the data filter does: a leading slash is dropped, the path stays under the destination
    member.name = name = member.name.lstrip("/" + os.sep)
    if not _inside(root, os.path.join(root, name)):
        raise UnsafeMember(f"{name!r} would be extracted outside the destination")
    if member.ischr() or member.isblk() or member.isfifo():
        raise UnsafeMember(f"{name!r} is a device or a FIFO")
    if member.issym():
        if os.path.isabs(member.linkname) or not _inside(
                root, os.path.join(root, os.path.dirname(name), member.linkname)):
            raise UnsafeMember(f"{name!r} is a link to {member.linkname!r}, outside the "
                               "destination")
    elif member.islnk() and (os.path.isabs(member.linkname)
                             or not _inside(root, os.path.join(root, member.linkname))):
        raise UnsafeMember(f"{name!r} is a link to {member.linkname!r}, outside the destination")
