"""What only root may read on this machine: covered in the sandbox when gpu-router runs as root.

bubblewrap drops every capability, but a job started by root is still uid 0 to the kernel (its
own namespace maps it there), so it owns root's files: /etc/shadow (0640 root) and the SSH host
keys (0600 root) were readable through the read-only /etc. The job gets an unprivileged uid in
its namespace (boundary.bwrap_argv) and every entry of the bound system folders that others may
not read (a file without o+r, a folder without o+rx) is covered: an empty file or folder.

The admin's folders (/etc, /opt, /usr/local) are walked at each launch (about 10 ms): a person
may chmod a file there at any time. The package-managed ones (/usr, /bin, /lib...) change only
through the package manager, so their walk (about half a second) is kept in a cache file beside
gpu-router's other caches, keyed by the package databases' and the folders' own change times.

Standard library only: the launcher imports this on the machine that runs the job.
"""

from __future__ import annotations

import json
import os
import stat

ADMIN_TOPS = ("/etc", "/opt", "/usr/local")
PACKAGE_TOPS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
PACKAGE_DBS = ("/var/lib/dpkg/status", "/var/lib/rpm", "/usr/lib/sysimage/rpm",
               "/var/lib/pacman/local", "/lib/apk/db/installed")
UNPRIVILEGED_ID = 65534  # nobody/nogroup: the job's uid and gid inside its namespace when root started it
MAX_ENTRIES = 400_000  # a walk this long is not a system folder: stop rather than stall a launch


def private(st: os.stat_result) -> bool:
    """Whether others may not read it (a folder: list and enter it)."""
    if stat.S_ISDIR(st.st_mode):
        return (st.st_mode & (stat.S_IROTH | stat.S_IXOTH)) != (stat.S_IROTH | stat.S_IXOTH)
    if stat.S_ISREG(st.st_mode):
        return not st.st_mode & stat.S_IROTH
    return False  # links lead to what is judged at its own place; devices are not bound


def walk(top: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Every private entry under `top` (itself included), the outermost only: a covered
    folder's contents are gone with it. Links are never followed."""
    found: list[str] = []
    try:
        if os.path.islink(top) or not os.path.isdir(top):
            return found
        if private(os.lstat(top)):
            return [top]
    except OSError:
        return found
    seen = 0
    stack = [top]
    while stack and seen < MAX_ENTRIES:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if entry.path in skip:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if private(st):
                found.append(entry.path)
            elif stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
    return sorted(found)


def _key() -> list:
    """What the package-managed walk depends on: the databases' and the folders' change times."""
    key = []
    for path in (*PACKAGE_DBS, *PACKAGE_TOPS):
        try:
            st = os.stat(path)
            key.append([path, st.st_mtime_ns, st.st_ino])
        except OSError:
            key.append([path, None, None])
    return key


def _package_paths(cache_file: str | None) -> list[str]:
    key = _key()
    if cache_file:
        try:
            fd = os.open(cache_file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd) as f:
                doc = json.load(f)
            if doc.get("key") == key and isinstance(doc.get("paths"), list):
                return [p for p in doc["paths"] if isinstance(p, str)]
        except (OSError, ValueError):
            pass
    tops = [t for t in PACKAGE_TOPS if not os.path.islink(t)]  # /bin -> usr/bin: walked once
    paths = [p for top in tops for p in walk(top, skip=ADMIN_TOPS)]
    if cache_file and os.path.isdir(os.path.dirname(cache_file)):
        tmp = f"{cache_file}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"key": key, "paths": paths}, f)
            os.replace(tmp, cache_file)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return paths


def paths(cache_file: str | None = None) -> list[str]:
    """The entries to cover for a job that root started (none for anyone else: an ordinary
    user's job reads only what that user could read anyway)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return []
    return [*(p for top in ADMIN_TOPS for p in walk(top)), *_package_paths(cache_file)]
