"""Whose journal it is. The journal decides what root does when root runs ``undo``, so it
is trusted only where no other user could have written it: the directory and the file
belong to the user who runs affmon and no one else may write them, every directory above
belongs to that user or root and is not writable by others (the sticky ``/tmp`` aside),
and no symbolic link is followed at the directory, the lock or the file (``sudo -E`` hands
root a user's ``HOME``: a link planted there would make root write elsewhere).

A directory writable by its group is still the user's alone when the group is the user's
private group (named after the user, no other member): the default with umask 002 on
distributions that give each user a group of their own.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
from pathlib import Path

from affmon.actions.journal_records import JournalError

ADVICE = "set XDG_STATE_HOME to a directory of your own"


def user_name(uid: int | None) -> str:
    if uid is None:
        return "unknown"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"UID {uid}"


def reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def others_may_write(info: os.stat_result, me: int) -> bool:
    """Whether someone other than ``me`` (and root) may write in a directory: world-writable
    or group-writable without the sticky bit, unless the group is ``me``'s private group."""
    if info.st_mode & stat.S_ISVTX:
        return False
    if info.st_mode & 0o002:
        return True
    return bool(info.st_mode & 0o020) and not _private_group(info.st_gid, me)


def _private_group(gid: int, me: int) -> bool:
    try:
        group = grp.getgrgid(gid)
        user = pwd.getpwuid(me)
    except KeyError:
        return False
    return group.gr_name == user.pw_name and user.pw_gid == gid and set(group.gr_mem) <= {user.pw_name}


def whose(me: int) -> str:
    return "root's alone" if me == 0 else f"{user_name(me)}'s or root's alone"


def check_ancestors(directory: Path) -> None:
    """Every directory above the journal's, as written and as resolved, must belong to root
    or to the user running affmon and not be writable by others (unless sticky, as /tmp):
    otherwise another user could swap the journal's directory for one of their own."""
    me = os.geteuid()
    paths = [directory.parent]
    with contextlib.suppress(OSError, RuntimeError):
        paths.append(Path(os.path.realpath(directory.parent)))
    for path in paths:
        for ancestor in (path, *path.parents):
            try:
                info = os.lstat(ancestor)
            except FileNotFoundError:
                continue  # created below, by us
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                if info.st_uid not in (0, me):
                    raise JournalError(
                        f"refusing the affmon journal in {directory}: {ancestor} is a link owned by"
                        f" {user_name(info.st_uid)}, another user ({ADVICE})"
                    )
                continue
            if info.st_uid not in (0, me) or others_may_write(info, me):
                who = user_name(info.st_uid) if info.st_uid not in (0, me) else "other users may write in it"
                raise JournalError(
                    f"refusing the affmon journal in {directory}: {ancestor} is not {whose(me)} ({who}); {ADVICE}"
                )


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and any missing parent, each 0700 whatever the umask (``mkdir
    -p`` would make the parents by the umask: 0775 under umask 002, which the check above
    then refuses)."""
    missing = []
    path = directory
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)  # the umask took bits off at creation, never added; keep it exact


def check_owned(info: os.stat_result, path: Path, *, regular: bool) -> None:
    me = os.geteuid()
    if info.st_uid != me:
        raise JournalError(
            f"refusing the affmon journal {path}: it belongs to {user_name(info.st_uid)}, not to {user_name(me)}"
            f" who runs affmon ({ADVICE})"
        )
    if regular and not stat.S_ISREG(info.st_mode):
        raise JournalError(f"refusing the affmon journal {path}: not a regular file")


def open_private_dir(directory: Path, *, create: bool) -> int | None:
    """``directory`` opened without following a link, after checking that no other user
    could have put it or anything above it there. None when it does not exist and
    ``create`` is False."""
    check_ancestors(directory)
    if create:
        try:
            make_private_dirs(directory)
        except OSError as exc:
            raise JournalError(f"cannot create the affmon journal's directory {directory}: {reason(exc)}") from None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise JournalError(f"cannot open the affmon journal's directory {directory}: it vanished") from None
        return None
    except OSError as exc:
        if os.path.islink(directory):
            raise JournalError(f"refusing the affmon journal's directory {directory}: it is a symbolic link") from None
        raise JournalError(f"cannot open the affmon journal's directory {directory}: {reason(exc)}") from None
    try:
        info = os.fstat(fd)
        check_owned(info, directory, regular=False)
        if others_may_write(info, os.geteuid()):
            raise JournalError(
                f"refusing the affmon journal's directory {directory}: other users may write in it"
                f" (mode {stat.S_IMODE(info.st_mode):04o}); chmod go-w it"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd
