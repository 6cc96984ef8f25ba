"""What the bundle's judge withheld inside a folder bound into the sandbox stays covered there
(issue 40: the survivor of `python bench/mutation.py --module boundary`: the loop of
`bwrap_argv` over `cover` dropped, which only the slow end-to-end jobs noticed).

A data folder is bound read-only whole; a credential file or a folder of them in it is covered
after the bind, a folder by an empty read-only tmpfs and a file by /dev/null; a link (leading
nowhere inside) and a path that is not there are left alone."""

from __future__ import annotations

import os

from core.runtime import boundary


def test_withheld_paths_in_a_bound_folder_are_covered_after_its_bind(tmp_path) -> None:
    data = tmp_path / "data"
    (data / ".aws").mkdir(parents=True)
    (data / ".env").write_text("KEY=1\n")
    os.symlink("/etc/hostname", data / "link")
    work = tmp_path / "code"
    work.mkdir()
    plan = {"workdir": str(work), "ro": [str(data)], "rw": [str(work)],
            "cover": [str(data / ".aws") + "/", str(data / ".env"), str(data / "link"), str(data / "gone")]}
    argv = boundary.bwrap_argv("bwrap", plan, ["true"])
    line = " ".join(argv)
    assert f"--tmpfs {data / '.aws'} --remount-ro {data / '.aws'}" in line
    assert f"--ro-bind /dev/null {data / '.env'}" in line
    assert str(data / "link") not in argv and str(data / "gone") not in argv
    bind = next(i for i in range(len(argv) - 2)
                if argv[i] == "--ro-bind" and argv[i + 2] == str(data))  # the data folder's own bind
    assert bind < argv.index(str(data / ".aws")) and bind < argv.index(str(data / ".env"))
    assert argv.index(str(data / ".env")) < argv.index("--chdir")


def test_the_macos_profile_denies_what_was_withheld_after_allowing_its_folder(tmp_path) -> None:
    """macOS's sandbox profile: the later rule wins, so the withheld path's deny follows the
    allow of the folder it lies in (the survivor: that loop dropped from seatbelt_profile)."""
    data, work = tmp_path / "data", tmp_path / "code"
    plan = {"workdir": str(work), "ro": [str(data)], "rw": [str(work)],
            "cover": [str(data / ".aws") + "/", str(data / ".env")]}
    profile = boundary.seatbelt_profile(plan).splitlines()
    allow = profile.index(f"(allow file-read* (subpath {boundary._sb_quote(str(data))}))")
    for withheld in (data / ".aws", data / ".env"):
        deny = f"(deny file-read* file-write* (subpath {boundary._sb_quote(str(withheld))}))"
        assert deny in profile and profile.index(deny) > allow


def test_binds_go_parents_first_and_the_fixed_mounts_are_these(tmp_path) -> None:
    """Bubblewrap mounts in argv order, so a parent bound after its child would hide it: binds
    go by depth, read-only before writable at the same depth (survivors: the sort key dropped
    or turned). The fixed mounts are exactly these, and a plan that says nothing of the network
    keeps it (`network: false` is what unshares it)."""
    outer, inner, peer = tmp_path / "job", tmp_path / "job" / "code" / "lib", tmp_path / "out"
    for d in (outer, inner, peer):
        d.mkdir(parents=True, exist_ok=True)
    plan = {"workdir": str(outer), "ro": [str(inner), str(peer)], "rw": [str(outer)]}
    argv = boundary.bwrap_argv("bwrap", plan, ["true"])
    binds = [(argv[i], argv[i + 2]) for i in range(len(argv) - 2)
             if argv[i] in ("--ro-bind", "--bind") and argv[i + 2] in {str(outer), str(inner), str(peer)}]
    assert binds == [("--ro-bind", str(peer)), ("--bind", str(outer)), ("--ro-bind", str(inner))]
    line = " ".join(argv)
    assert ("--proc /proc --dev /dev --ro-bind-try /sys /sys --tmpfs /tmp --tmpfs /var/tmp --tmpfs /run"
            in line)
    assert "--cap-drop ALL" in line and "--hostname gpu-router-job" in line
    assert "--unshare-net" not in argv
    assert "--unshare-net" in boundary.bwrap_argv("bwrap", {**plan, "network": False}, ["true"])
