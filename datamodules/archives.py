"""Safe extraction of ``.tar.gz`` archives on every Python the project accepts.

Python 3.11.4 added extraction filters (PEP 706; ``extractall(..., filter="data")``);
Debian 12's own Python is 3.11.2 and has none, and there a plain ``extractall`` writes
wherever a member's name or link points. :func:`extract_members` therefore checks every
member itself before anything is written, on every Python, and refuses the archive
(``InputError`` naming it and the member) when a member

* has an absolute name, or a name with a ``..`` part that leaves the folder,
* is a symbolic link whose target is absolute or resolves outside the folder,
* is a hard link whose target lies outside the folder,
* is anything but a regular file, a folder or a link (character or block device, FIFO).

Where ``tarfile.data_filter`` exists it is applied on top (it also drops set-user-ID bits
and the archive's owners); elsewhere the same normalisation is done on copies of the
members: mode bits ``rwxr-xr-x`` at most, owner the extracting user. Both Pythons treat
one archive the same way (an absolute name is refused, not stripped as the filter would).
"""

from __future__ import annotations

import copy
import os
import posixpath
import tarfile
from pathlib import Path

from foundation.errors import InputError


def _inside(name: str) -> bool:
    """Whether the relative POSIX path ``name`` stays inside the folder it is joined to."""
    normal = posixpath.normpath(name)
    return not (posixpath.isabs(name) or normal == ".." or normal.startswith("../"))


def _refusal(member: tarfile.TarInfo) -> str | None:
    """Why ``member`` must not be extracted, or None."""
    if posixpath.isabs(member.name) or not _inside(member.name):
        return "its name leaves the folder"
    if member.issym():
        link_dir = posixpath.dirname(member.name)
        if posixpath.isabs(member.linkname) or not _inside(posixpath.join(link_dir, member.linkname)):
            return f"it is a symbolic link to {member.linkname!r}, outside the folder"
    elif member.islnk():
        if posixpath.isabs(member.linkname) or not _inside(member.linkname):
            return f"it is a hard link to {member.linkname!r}, outside the folder"
    elif not (member.isreg() or member.isdir()):
        return "it is a device file or FIFO, not a file, folder or link"
    return None


def _normalised(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """A copy of ``member`` with the data filter's modes and owner (for Pythons without it)."""
    member = copy.copy(member)
    member.mode &= 0o755
    if member.isreg() or member.islnk():
        member.mode |= 0o600
    member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
    return member


def extract_members(tar: tarfile.TarFile, dest: Path, archive: Path) -> None:
    """Extract every member of the open ``tar`` (read from ``archive``) into ``dest``, after
    the checks of this module's docstring; an unsafe member refuses the whole archive
    before anything is written."""
    members = tar.getmembers()
    for member in members:
        reason = _refusal(member)
        if reason is not None:
            raise InputError(
                f"archive {str(archive)!r}: member {member.name!r} is refused because {reason}; "
                "expected files and folders below the archive's top folder"
            )
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, members=members, filter="data")
    else:  # Python < 3.11.4: no extraction filters
        tar.extractall(dest, members=[_normalised(m) for m in members])
