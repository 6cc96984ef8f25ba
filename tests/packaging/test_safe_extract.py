"""Hostile output archives: nothing is written outside the run folder, bombs are capped.

The archives are built by hand with tarfile, the way a compromised host could build them:
symlinks and hard links out of the folder, `..` and absolute names, devices and FIFOs, a file
that replaces a folder, a symlink followed by a file written "through" it, and a gzip bomb.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
from pathlib import Path

from core.packaging.safe_extract import OutputCaps, safe_extract, write_files


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], gz: bool = True) -> Path:
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def _special(name: str, kind: bytes, **attrs) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    for k, v in attrs.items():
        setattr(info, k, v)
    return info, None


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_plain_outputs_come_home_with_modes(tmp_path: Path) -> None:
    arc = _archive(tmp_path / "ok.tar.gz", [
        _special("./", tarfile.DIRTYPE),
        _file("./result.json", b'{"ok": 1}'),
        _special("./plots", tarfile.DIRTYPE),
        _file("./plots/a.png", b"png"),
        _file("./run.sh", b"#!/bin/sh\n", 0o4755),  # setuid is dropped, exec kept
    ])
    dest = tmp_path / "runs" / "job1"
    notes = safe_extract(arc, dest)
    assert notes == []
    assert (dest / "result.json").read_bytes() == b'{"ok": 1}'
    assert (dest / "plots" / "a.png").read_bytes() == b"png"
    mode = (dest / "run.sh").stat().st_mode
    assert mode & 0o111 and not mode & stat.S_ISUID
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["job1"]  # no staging left behind


def test_hostile_members_write_nothing_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("untouched")
    arc = _archive(tmp_path / "evil.tar.gz", [
        _file("../escape.txt", b"pwned"),
        _file("a/../../escape2.txt", b"pwned"),
        _file(str(tmp_path / "abs.txt"), b"pwned"),
        _file("/etc/gpu-router-pwned", b"pwned"),
        _special("link", tarfile.SYMTYPE, linkname=str(outside)),
        _file("link/victim.txt", b"pwned"),  # written "through" the link
        _special("hard", tarfile.LNKTYPE, linkname=str(victim)),
        _special("uplink", tarfile.SYMTYPE, linkname="../outside/victim.txt"),
        _special("dev", tarfile.CHRTYPE, devmajor=1, devminor=3),
        _special("blk", tarfile.BLKTYPE, devmajor=7, devminor=0),
        _special("fifo", tarfile.FIFOTYPE),
        _file("good.txt", b"fine"),
        _file("good.txt", b"second copy"),
    ])
    run = tmp_path / "runs" / "job2"
    notes = safe_extract(arc, run)
    assert victim.read_text() == "untouched"
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "escape2.txt").exists()
    assert not (tmp_path / "abs.txt").exists() and not Path("/etc/gpu-router-pwned").exists()
    assert _tree(outside) == {"victim.txt"}
    assert (run / "good.txt").read_bytes() == b"fine"
    # nothing but regular files and folders, all inside the run folder
    for p in run.rglob("*"):
        st = p.lstat()
        assert stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode), p
    text = "\n".join(notes)
    for word in ("../escape.txt", "a link", "a device", "a FIFO", "appears twice", "/etc/gpu-router-pwned"):
        assert word in text, word
    # link/victim.txt landed (if at all) as a plain file inside the run folder
    assert not (run / "link").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.tar.gz", "outside", "runs"]


def test_a_size_bomb_is_stopped_at_the_cap(tmp_path: Path) -> None:
    # 200 MB of zeros compresses to ~200 KB: the header's size is honest, the total is not
    big = tmp_path / "bomb.tar.gz"
    with gzip.open(big, "wb", compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w") as tar:
            for i in range(4):
                info = tarfile.TarInfo(f"zeros{i}.bin")
                info.size = 50 * 1024 * 1024
                tar.addfile(info, _Zeros(info.size))
    assert big.stat().st_size < 2 * 1024 * 1024
    dest = tmp_path / "runs" / "job3"
    notes = safe_extract(big, dest, max_bytes=64 * 1024 * 1024)
    total = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    assert total <= 64 * 1024 * 1024
    assert any("byte cap" in n for n in notes)


def test_too_many_files_stop_at_the_count_cap(tmp_path: Path) -> None:
    arc = _archive(tmp_path / "many.tar.gz", [_file(f"f{i}.txt", b"1") for i in range(50)])
    dest = tmp_path / "runs" / "job4"
    notes = safe_extract(arc, dest, max_files=10)
    assert len(list(dest.iterdir())) == 10
    assert any("more than 10 files" in n for n in notes)


def test_a_file_in_the_way_of_a_folder_and_a_damaged_archive(tmp_path: Path) -> None:
    arc = _archive(tmp_path / "clash.tar.gz", [_file("a", b"file"), _file("a/b", b"under a file")])
    dest = tmp_path / "runs" / "job5"
    notes = safe_extract(arc, dest)
    assert (dest / "a").read_bytes() == b"file"
    assert any("a/b" in n for n in notes)
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(arc.read_bytes()[:40])
    notes = safe_extract(broken, tmp_path / "runs" / "job6")
    assert notes and ("damaged" in notes[0] or "could not be read" in notes[0])


def test_existing_run_folder_is_merged_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "runs" / "job7"
    dest.mkdir(parents=True)
    (dest / "job.json").write_text("{}")
    os.symlink(outside, dest / "plots")  # a link already in the run folder is replaced, not followed
    arc = _archive(tmp_path / "m.tar.gz", [_special("plots", tarfile.DIRTYPE), _file("plots/p.png", b"png")])
    assert safe_extract(arc, dest) == []
    assert (dest / "job.json").read_text() == "{}"
    assert not (dest / "plots").is_symlink() and (dest / "plots" / "p.png").exists()
    assert list(outside.iterdir()) == []


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.left = n

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def test_files_named_by_a_listing_are_written_inside_only_and_capped(tmp_path: Path) -> None:
    """write_files: names from someone else's listing (a Modal volume's), read only in turn."""
    dest = tmp_path / "run" / "ckpt"
    read: list[str] = []

    def chunks(name: str, data: bytes):
        read.append(name)
        yield data

    listing = [("../x", b"evil"), ("/abs-x", b"evil"), ("a/../../y", b"evil"), ("ok/a.bin", b"hi"),
               ("b.bin", b"12345"), ("c.bin", b"over the cap")]
    notes = write_files(dest, ((n, len(d), chunks(n, d)) for n, d in listing), caps=OutputCaps(max_bytes=8))
    assert (dest / "ok" / "a.bin").read_bytes() == b"hi" and (dest / "b.bin").read_bytes() == b"12345"
    assert not (dest / "c.bin").exists() and any("cap" in n for n in notes), notes
    assert read == ["ok/a.bin", "b.bin"]  # a refused name is never read, nor anything past the cap
    assert sum("leaves the folder" in n for n in notes) == 3, notes
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.bin", "b.bin", "ckpt", "ok", "run"]


# -- names masked with a job's secrets -------------------------------------------------------

import base64  # noqa: E402
import urllib.parse  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tests.props import examples

from core.packaging.safe_extract import masked_names, safe_copy_tree  # noqa: E402
from core.runtime.redact import SecretPattern  # noqa: E402

NAME_SECRETS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/\\"),
                       min_size=8, max_size=24)
NAME_PARTS = st.text(st.characters(min_codepoint=0x30, max_codepoint=0x7A, exclude_characters="/\\[]"),
                     max_size=8)


def _name_forms(value: str) -> list[str]:
    """How code names a file after a token: as it is, hex, URL-safe base64, URL-quoted
    (computed here, apart from redact.py)."""
    raw = value.encode()
    return [value, raw.hex(), base64.urlsafe_b64encode(raw).decode().rstrip("="),
            urllib.parse.quote(value, safe="")]


def _all_names(root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in root.rglob("*")]


def _mask_of(value: str):
    pattern = SecretPattern([value])
    return lambda name: pattern.mask(name.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=NAME_SECRETS, form=st.integers(0, 3), before=NAME_PARTS, after=NAME_PARTS, way=st.integers(0, 2))
def test_no_name_that_comes_home_holds_a_secret_by_any_entry(tmp_path_factory, value: str, form: int,
                                                              before: str, after: str, way: int) -> None:
    """Whichever way outputs come home (an archive, a job's folder, a listing), a name that
    holds a secret value in a form code names files with comes home masked, its bytes intact;
    the same name inside a folder name too; a plain neighbour is untouched."""
    tmp = tmp_path_factory.mktemp("names")
    spelled = _name_forms(value)[form]
    leaf = f"{before}{spelled}{after}".replace("/", "_")
    plain = "plain.txt"
    files = {f"cache/{leaf}": b"cached", f"{leaf}.d/inner.bin": b"inner", plain: b"kept"}
    dest = tmp / "runs" / "x"
    with masked_names(_mask_of(value)):
        if way == 0:
            notes = safe_extract(_archive(tmp / "o.tar.gz", [_file(n, d) for n, d in files.items()]), dest)
        elif way == 1:
            src = tmp / "out"
            for n, d in files.items():
                (src / n).parent.mkdir(parents=True, exist_ok=True)
                (src / n).write_bytes(d)
            notes = safe_copy_tree(src, dest)
        else:
            notes = write_files(dest, ((n, len(d), iter([d])) for n, d in files.items()))
    names = _all_names(dest)
    for name in names + notes:
        for f in _name_forms(value):
            assert f not in name, (name, f)
    assert (dest / plain).read_bytes() == b"kept"
    got = sorted((dest / n).read_bytes() for n in names if (dest / n).is_file())
    assert got == sorted(files.values()), (names, notes)
    assert any("[secret]" in n for n in names)
    # nothing was ever written under the real name beside dest (the staging folder is gone)
    for left in _all_names(tmp / "runs"):
        assert spelled not in left


def test_names_outside_masked_names_are_kept_as_the_job_wrote_them(tmp_path: Path) -> None:
    """No secrets, no mask: a job's own naming is not second-guessed."""
    archive = _archive(tmp_path / "o.tar.gz", [_file("tok_abcdefgh.bin", b"x")])
    assert safe_extract(archive, tmp_path / "d") == []
    assert (tmp_path / "d" / "tok_abcdefgh.bin").exists()


def test_a_secret_with_a_slash_spanning_folders_leaves_no_half_of_it_in_a_folder_name(tmp_path: Path) -> None:
    """`out/tok_<value>.bin` where the value holds a '/': the job made a folder named after
    the value's first half. Home masks the file's whole path and makes no such folder."""
    value = "AKIAxx/Zq8SECRETtail99"
    src = tmp_path / "out"
    (src / f"tok_{value}.bin").parent.mkdir(parents=True)
    (src / f"tok_{value}.bin").write_bytes(b"cached")
    (src / "empty").mkdir()
    dest = tmp_path / "runs" / "x"
    with masked_names(_mask_of(value)):
        notes = safe_copy_tree(src, dest)
    assert notes == [] and (dest / "tok_[secret].bin").read_bytes() == b"cached"
    assert not any("AKIAxx" in n or "Zq8SECRET" in n for n in _all_names(tmp_path / "runs"))


def test_a_colon_is_a_plain_character_of_a_name_but_a_drive_path_is_absolute() -> None:
    from core.packaging.safe_extract import clean_name

    for name in ("0:1.txt", "step:10.ckpt", "a:b/c.bin", "d:x"):
        assert clean_name(name) == name
    for name in ("C:/Windows/x", "c:\\x", "C:", "/etc/passwd", "../x", "a/../../x"):
        assert clean_name(name) is None
