"""What of a local `--data` set may be uploaded: the bundle's judge, on a folder or one file.

A data set ships whole (no `.gitignore`, nested repositories included as they are), but each
file passes the same gate as the project's files: credentials, links and special files stay
behind and are named in a warning.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from core import paths
from core.errors import UserError
from core.packaging.candidates import tree_files
from core.packaging.credentials import place_reason, withheld_reason
from core.packaging.filecache import FileHashCache
from core.packaging.gate import Gate
from core.packaging.leftout import file_kind, left_out_item
from core.packaging.listing import home_folder

# What the kernel and the running system show as files: process views, devices, the runtime
# folder with the session bus and agents' sockets. None of it is a data set, and binding any of
# it into a sandbox hands a job something of the person's (a read-only bind does not stop connect()).
SYSTEM_PLACES = ("/proc", "/sys", "/dev", "/run")
KIND_WORDS = {"fifo": "a FIFO (named pipe)", "socket": "a socket", "device": "a device"}


def source_problem(source: Path) -> str | None:
    """Why `source` (after every link) is not a data set, or None for a plain file or folder.

    A data set is bound into the job's sandbox or uploaded: a socket there is the session bus or
    an SSH agent (the keychain, the person's keys), a FIFO blocks whoever reads it, a device or
    /proc entry is the machine's. Judged on the resolved path, so a link in the project to any
    of them is refused the same way."""
    real = os.path.realpath(source)
    for top in SYSTEM_PLACES:
        if real == top or real.startswith(top + "/"):
            return f"{real} lies under {top}, the system's own files, not a data set"
    try:
        st = os.stat(real)
    except OSError as exc:
        return f"{real} cannot be read: {exc.strerror}"
    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
        return None
    kind = file_kind(st.st_mode)
    return f"{real} is {KIND_WORDS.get(kind, 'a ' + kind)}, not a file or folder"


def _private_places() -> list[tuple[str, Path, bool]]:
    """gpu-router's home (and all in it) and its config file, which no job reads (a data set
    is bound into the sandbox): (what, where, whether what lies inside counts too)."""
    places = [("gpu-router's home", paths.home(), True), ("gpu-router's config", paths.user_config_file(), False)]
    return [(what, Path(os.path.realpath(place)), whole) for what, place, whole in places]


@dataclass
class DataListing:
    """The files of one `--data` set that may be uploaded, and those withheld."""

    source: Path
    files: list[str]  # relative to `source` ("" when it is a single file)
    withheld: list[dict]

    def warnings(self, name: str) -> list[str]:
        if not self.withheld:
            return []
        shown = ", ".join(w["path"] for w in self.withheld[:5])
        more = f" and {len(self.withheld) - 5} more" if len(self.withheld) > 5 else ""
        return [f"data {name}: {len(self.withheld)} credential or special file(s) withheld "
                f"and not uploaded: {shown}{more}"]


def list_data(source: Path, name: str = "", cache: FileHashCache | None = None) -> DataListing:
    """What of a local data set may be uploaded: the same judge as the bundle's files.

    A data path that is itself a credential (or lies in a credential folder, or is the home
    folder) is refused: data is for data sets, secrets go through `gpu secrets`."""
    label = f"data {name!r}" if name else "data"
    problem = source_problem(source)
    if problem:
        raise UserError(f"{label}: {problem}", where=str(source),
                        fix="a data set is made of files and folders only: pass a file or a folder "
                            "(copy what you need into one)")
    fix = "data is for data sets: put tokens in the keychain (gpu secrets set NAME) and pass --secret NAME"
    source = Path(os.path.realpath(source))
    reason = withheld_reason(source.as_posix()) if source.is_file() else place_reason(source.as_posix())
    if reason:
        raise UserError(f"{label}: {source} is a credential ({reason.removeprefix('withheld: ')})",
                        where=str(source), fix=fix)
    home = home_folder()
    if home is not None and (source == home or source in home.parents):
        raise UserError(f"{label}: {source} is your home folder or holds it", where=str(source),
                        fix="pass the data set's own folder")
    hf_sets = Path(os.path.realpath(paths.hf_data_dir()))  # downloaded hf:// sets are data, read in place
    for what, place, whole in _private_places():
        inside = whole and place in source.parents and hf_sets not in source.parents
        if source == place or source in place.parents or inside:
            raise UserError(f"{label}: {source} is {what} or {'lies in' if inside else 'holds'} it "
                            f"({place}): a job never reads it", where=str(source),
                            fix="pass the data set's own folder")
    own_cache = cache is None
    cache = cache or FileHashCache()
    try:
        try:
            st = source.lstat()
        except OSError as exc:
            raise UserError(f"{label}: {source} cannot be read: {exc.strerror}",
                            where=str(source), fix="check the path") from None
        if stat.S_ISREG(st.st_mode):
            gate = Gate(source.parent, cache)
            reason = gate.judge(source.name, st)
            if reason:
                raise UserError(f"{label}: {source} is {reason.removeprefix('withheld: ')}",
                                where=str(source), fix=fix)
            return DataListing(source=source, files=[""], withheld=[])
        gate = Gate(source, cache, prefix=source.as_posix().rstrip("/") + "/")  # rules read the whole path
        items: list[tuple[str, os.stat_result]] = []
        withheld: list[dict] = []
        for rel in sorted(tree_files(source, "", [], repos=False)):
            try:
                fst = (source / rel).lstat()
            except OSError:
                continue
            if stat.S_ISREG(fst.st_mode):
                items.append((rel, fst))
            else:  # a link is not followed (it may lead anywhere) and, like a pipe, not shipped
                withheld.append(left_out_item(source / rel, rel, f"not a regular file ({file_kind(fst.st_mode)})"))
        verdicts = gate.judge_many(items)
        withheld += [left_out_item(source / rel, rel, verdicts[rel]) for rel, _ in items if rel in verdicts]
        return DataListing(source=source, files=[rel for rel, _ in items if rel not in verdicts],
                           withheld=withheld)
    finally:
        if own_cache:
            cache.close()
