"""What ships in a bundle, checked as a user would: real git repos, real files, the packed tarball.

Every test that builds a bundle uses the `home` fixture, because bundles are stored under
$GPU_ROUTER_HOME/bundles and the stat cache under its cache dir.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from core import paths
from core.packaging import objects
from core.packaging.bundle import Bundle, make_bundle
from core.packaging.listing import list_project
from core.errors import UserError
from tests.conftest import gpu_json, make_git_project, run_gpu

TRAIN = "print('training')\n"

# Every credential file of the list, as a path inside the project. Each one is
# written with a unique marker so a test can look for its bytes anywhere in the tarball.
CREDENTIALS = [
    ".env",
    ".env.local",
    ".env.production",
    "config/prod/.env",
    "key.pem",
    "certs/SERVER.PEM",
    "tls/server.key",
    "cert.p12",
    "cert.pfx",
    "id_rsa",
    "id_rsa.pub",
    "id_ed25519",
    "keys/id_ed25519_deploy",
    "deploy_rsa",
    ".ssh/config",
    ".ssh/authorized_keys",
    ".netrc",
    ".git-credentials",
    ".pgpass",
    ".aws/credentials",
    ".aws/config",
    "credentials.json",
    "secrets/credentials.json",
    "application_default_credentials.json",
    "kaggle.json",
    ".kaggle/settings.txt",
    ".modal.toml",
    ".huggingface/token",
    "home/.huggingface/token",
    ".docker/config.json",
    ".npmrc",
    ".pypirc",
    "passwords.kdbx",
    "office.ovpn",
    ".bash_history",
    ".zsh_history",
    ".sh_history",
    ".history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".local/share/fish/fish_history",
]


# -- helpers -------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> None:
    """Run git in `repo` with a throwaway identity (tests must not need the user's config)."""
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                    *args], check=True, capture_output=True)


def commit_all(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def marker(rel: str) -> str:
    """Text no other file holds, to prove a credential's bytes never reach the tarball."""
    return f"SECRET-VALUE-OF-{rel}-0xC0FFEE"


def members(bundle: Bundle) -> dict[str, tarfile.TarInfo]:
    """The bundle's files by name, as a target that takes one archive would see them."""
    with tarfile.open(objects.archive(bundle.hash), "r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def raw_tar(bundle: Bundle) -> bytes:
    """Every byte the store holds (manifests and objects, whichever bundle made them), and the
    one-archive form: a secret must not be anywhere in them."""
    stored = b"".join(p.read_bytes() for where in (paths.bundles_dir(), paths.objects_dir())
                      for p in sorted(where.rglob("*")) if p.is_file())
    return stored + gzip.decompress(objects.archive(bundle.hash).read_bytes())


def left_out(bundle: Bundle) -> dict[str, dict]:
    return {e["path"]: e for e in bundle.summary().get("left_out", [])}


def assert_credential_withheld(bundle: Bundle, rel: str, shown_as: str | None = None) -> None:
    """Not in the tarball (not as itself, not via the link), named in left_out as a credential."""
    shown_as = shown_as or rel
    names = members(bundle)
    assert rel not in names and shown_as not in names, sorted(names)
    assert marker(rel).encode() not in raw_tar(bundle)
    entries = [e for e in bundle.summary()["left_out"] if e["path"] == shown_as]
    assert len(entries) == 1, bundle.summary()["left_out"]
    assert "credential" in entries[0]["reason"]


def bundle_files(home: Path) -> set[str]:
    return {p.name for p in (home / "bundles").iterdir()} if (home / "bundles").exists() else set()


# -- credentials never ship ----------------------------------------------------------------


@pytest.mark.parametrize("rel", CREDENTIALS)
def test_tracked_credential_never_ships(home: Path, tmp_path: Path, rel: str) -> None:
    """A secret someone committed by mistake still stays on this machine."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, rel: marker(rel)})
    bundle = make_bundle(project)
    assert "train.py" in members(bundle)
    assert_credential_withheld(bundle, rel)


@pytest.mark.parametrize("rel", CREDENTIALS)
def test_untracked_credential_never_ships(home: Path, tmp_path: Path, rel: str) -> None:
    """Untracked files git does not ignore ship, except credentials."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    write(project / rel, marker(rel))
    bundle = make_bundle(project)
    assert_credential_withheld(bundle, rel)


@pytest.mark.parametrize("rel", CREDENTIALS)
def test_included_ignored_credential_never_ships(home: Path, tmp_path: Path, rel: str) -> None:
    """`include` (by exact path and by a catch-all glob) cannot pull a credential in."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN}, gitignore=f"/{rel}\n")
    write(project / rel, marker(rel))
    bundle = make_bundle(project, include=[rel, "**"])
    assert_credential_withheld(bundle, rel)


@pytest.mark.parametrize("rel", CREDENTIALS)
def test_credential_behind_symlink_never_ships(home: Path, tmp_path: Path, rel: str) -> None:
    """An innocent-looking link to a credential is withheld, with the credential as reason."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN}, gitignore=f"/{rel}\n")
    write(project / rel, marker(rel))
    (project / "notes.txt").symlink_to(rel)
    bundle = make_bundle(project, include=["notes.txt"])
    assert_credential_withheld(bundle, rel, shown_as="notes.txt")


@pytest.mark.parametrize("rel", CREDENTIALS)
def test_credential_outside_git_never_ships(home: Path, tmp_path: Path, rel: str) -> None:
    """Outside a git repository (the .gitignore walk) the same list holds."""
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    write(project / rel, marker(rel))
    bundle = make_bundle(project)
    assert "train.py" in members(bundle)
    assert_credential_withheld(bundle, rel)


@pytest.mark.parametrize("folder", [".ssh", ".aws", ".kaggle"])
def test_symlink_to_credential_folder_is_withheld(home: Path, tmp_path: Path, folder: str) -> None:
    """A link to a whole credential folder is withheld, not shipped as a link into it."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, f"{folder}/x": marker(folder)})
    (project / "keys").symlink_to(folder)
    bundle = make_bundle(project)
    assert not any(n == "keys" or n.startswith(f"{folder}/") for n in members(bundle))
    assert "credential" in left_out(bundle)["keys"]["reason"]
    assert marker(folder).encode() not in raw_tar(bundle)


def test_cli_bundle_list_never_lists_a_credential(home: Path, tmp_path: Path) -> None:
    """`gpu bundle --list --json` shows what ships; no credential is ever in that list."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "lib/util.py": "x = 1\n",
                                                ".env": "A=1\n", ".aws/credentials": "k\n"})
    for rel in CREDENTIALS:
        write(project / rel, marker(rel))
    doc = gpu_json("bundle", "--list", cwd=project)
    assert {"train.py", "lib/util.py"} <= set(doc["list"])
    assert doc["files"] == len(doc["list"])
    for rel in CREDENTIALS:
        assert rel not in doc["list"]
    withheld = {e["path"] for e in doc["left_out"] if "credential" in e["reason"]}
    assert set(CREDENTIALS) <= withheld
    assert "hint" not in doc  # train.py refers to none of what was left out
    assert len(doc["hash"]) == 64 and doc["root"] == str(project.resolve())


# -- .git/ and runs/ -----------------------------------------------------------------------


def test_git_and_runs_never_ship(home: Path, tmp_path: Path) -> None:
    """Not committed, untracked or included: .git/ and runs/ stay home (also in a sub-project)."""
    repo = make_git_project(tmp_path / "repo", {"proj/train.py": TRAIN, "runs/old.txt": "old\n",
                                                "proj/runs/committed.txt": "c\n", "other.py": "y\n"})
    write(repo / "proj" / "runs" / "abc123" / "result.json", "{}")
    write(repo / "runs" / "new.txt", "new\n")
    listing = list_project(repo / "proj", include=["runs/**", "../.git", "../.git/*", "../runs"])
    assert listing.root == repo.resolve() and listing.project_rel == "proj"
    names = set(listing.entries)
    assert {"proj/train.py", "other.py"} <= names
    assert not [n for n in names if n.startswith((".git/", "runs/", "proj/runs/"))], names
    bundle = make_bundle(repo / "proj", include=["runs/**", "../.git/*"])
    assert not [n for n in members(bundle) if n.startswith((".git/", "runs/", "proj/runs/"))]


# -- symlinks out of the project -----------------------------------------------------------


def outside_secrets(tmp_path: Path) -> tuple[Path, Path]:
    """A secret file and a folder holding one, both outside any project."""
    secret = write(tmp_path / "outside" / "secret.txt", marker("outside-file"))
    folder = tmp_path / "outside" / "dir"
    write(folder / "inner.txt", marker("outside-dir"))
    return secret, folder


def assert_links_not_followed(bundle: Bundle, *link_names: str) -> None:
    names = members(bundle)
    data = raw_tar(bundle)
    assert marker("outside-file").encode() not in data
    assert marker("outside-dir").encode() not in data
    for name in link_names:
        assert name not in names and not any(n.startswith(name + "/") for n in names)
        assert "outside the project" in left_out(bundle)[name]["reason"]


def test_committed_symlinks_out_of_the_project_are_not_followed(home: Path, tmp_path: Path) -> None:
    secret, folder = outside_secrets(tmp_path)
    project = tmp_path / "p"
    project.mkdir()
    (project / "creds.txt").symlink_to(secret)
    (project / "shared").symlink_to(folder)
    write(project / "train.py", TRAIN)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    commit_all(project)
    assert_links_not_followed(make_bundle(project), "creds.txt", "shared")


def test_untracked_and_included_symlinks_out_are_not_followed(home: Path, tmp_path: Path) -> None:
    """Neither as untracked files nor pulled in by include does a link lead outside."""
    secret, folder = outside_secrets(tmp_path)
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN}, gitignore="ignored/\n")
    (project / "creds.txt").symlink_to(secret)
    (project / "shared").symlink_to(folder)
    (project / "ignored").mkdir()
    (project / "ignored" / "up").symlink_to("../../outside/secret.txt")
    bundle = make_bundle(project, include=["ignored", "shared"])
    assert_links_not_followed(bundle, "creds.txt", "shared", "ignored/up")


def test_include_through_an_outside_link_is_refused(home: Path, tmp_path: Path) -> None:
    """`include shared/inner.txt` where shared links outside would leave the project."""
    _, folder = outside_secrets(tmp_path)
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    (project / "shared").symlink_to(folder)
    with pytest.raises(UserError, match="leaves the project"):
        list_project(project, include=["shared/inner.txt"])
    listing = list_project(project, include=["shared/*"])  # a glob never walks into the link
    assert not [n for n in listing.entries if n.startswith("shared")]


def test_symlinks_out_of_a_project_outside_git(home: Path, tmp_path: Path) -> None:
    secret, folder = outside_secrets(tmp_path)
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    (project / "creds.txt").symlink_to(secret)
    (project / "shared").symlink_to(folder)
    assert_links_not_followed(make_bundle(project), "creds.txt", "shared")


def test_symlink_inside_the_project_ships_as_a_link(home: Path, tmp_path: Path) -> None:
    """A link that stays inside is kept as a link (its target ships once, by itself)."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "conf/base.yaml": "lr: 1\n"})
    (project / "conf" / "current.yaml").symlink_to("base.yaml")
    names = members(make_bundle(project))
    assert names["conf/current.yaml"].issym()
    assert names["conf/current.yaml"].linkname == "base.yaml"
    assert names["conf/base.yaml"].isfile()


def _stored_bytes() -> bytes:
    return b"".join(p.read_bytes() for where in (paths.bundles_dir(), paths.objects_dir())
                    if where.exists() for p in sorted(where.rglob("*")) if p.is_file())


@pytest.mark.parametrize("how", ["one process", "helpers", "remembered", "dry run"])
def test_a_folder_swapped_for_a_link_after_listing_ships_nothing_from_outside(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Listed with `c/` a plain folder; before the pack, `c` is renamed and `c -> outside`
    put in its place, where a file of the same name holds other bytes (an SSO cache's, which
    no rule calls a credential). The packer opens `c/5f1e2d.json` through the link: the file
    it opened is not the one listed (st_dev, st_ino), so nothing of it is stored."""
    from core.packaging import spread
    from core.packaging.bundle import build
    from core.packaging.filecache import FileHashCache

    outside = tmp_path / "outside"
    inside = {"train.py": TRAIN, "c/5f1e2d.json": '{"accessToken":"-"}\n'}
    if how == "helpers":  # enough files that helper processes store some (c/ among theirs)
        monkeypatch.setattr(spread, "MIN_JOBS", 40)
        monkeypatch.setattr(spread, "CHUNK_JOBS", 8)
        monkeypatch.setattr(spread.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
        inside.update({f"c/m{i:03d}.py": f"X = {i}\n" for i in range(300)})
    secret = "OUTSIDE-BYTES-aoaAAAAREALSSOTOKEN-0xC0FFEE"
    for rel in inside:
        if rel.startswith("c/"):
            write(outside / rel[2:], '{"accessToken":"%s","n":"%s"}\n' % (secret, rel))
    project = make_git_project(tmp_path / "p", inside)
    cache = FileHashCache()
    try:
        if how == "remembered":  # rows reused from the listing cache (core/packaging/snapshot.py)
            old = time.time() - 3600
            for p in project.rglob("*"):
                os.utime(p, (old, old), follow_symlinks=False)
            build(list_project(project, cache=cache), cache)
            shutil.rmtree(paths.objects_dir())  # gone (gc): the next pack reads every file again
            shutil.rmtree(paths.bundles_dir(), ignore_errors=True)
        listing = list_project(project, cache=cache)
        assert how != "remembered" or listing.reused == len(inside)
        assert "c/5f1e2d.json" in listing.entries
        os.rename(project / "c", project / "c.old")
        os.symlink(outside, project / "c")
        with pytest.raises(UserError, match="c/[^ ]+ changed while packing") as refused:
            build(listing, cache, dry_run=how == "dry run")
    finally:
        cache.close()
    assert "submit again" in refused.value.message()
    assert secret.encode() not in _stored_bytes()


# -- FIFOs and other special files ---------------------------------------------------------


@pytest.mark.timeout(20)
def test_fifos_do_not_hang_a_git_project(home: Path, tmp_path: Path) -> None:
    """A named pipe in a tracked folder, untracked, included, or replacing a tracked file."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "d/keep.py": "x\n",
                                                "was_file.txt": "t\n"})
    os.mkfifo(project / "d" / "pipe")
    os.mkfifo(project / "top_pipe")
    (project / "was_file.txt").unlink()
    os.mkfifo(project / "was_file.txt")
    bundle = make_bundle(project, include=["d/pipe", "d/*"])
    names = members(bundle)
    assert {"train.py", "d/keep.py"} <= set(names)
    assert not {"d/pipe", "top_pipe", "was_file.txt"} & set(names)
    assert "not a regular file" in left_out(bundle)["was_file.txt"]["reason"]


@pytest.mark.timeout(20)
def test_fifos_do_not_hang_outside_git(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    write(project / "d" / "keep.py", "x\n")
    os.mkfifo(project / "pipe")
    os.mkfifo(project / "d" / "pipe")
    bundle = make_bundle(project, include=["d/*"])
    assert set(members(bundle)) == {"train.py", "d/keep.py"}
    out = left_out(bundle)
    assert "fifo" in out["pipe"]["reason"] and "fifo" in out["d/pipe"]["reason"]


# -- what was left out, summarised ---------------------------------------------------------


def sized(path: Path, n: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * n)


def test_ignored_folders_are_summarised_with_counts_and_sizes(home: Path, tmp_path: Path) -> None:
    """The user learns what stayed home and how big it is, per folder."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "sub/keep.py": "k\n"},
                               gitignore="data/\n*.log\n")
    sized(project / "data" / "a.bin", 1000)
    sized(project / "data" / "deep" / "b.bin", 2345)
    sized(project / "data" / "c.txt", 10)
    sized(project / "x.log", 7)
    sized(project / "sub" / "y.log", 3)
    sized(project / "sub" / "z.log", 4)
    summary = make_bundle(project).summary()
    groups = {e["path"]: e for e in summary["left_out"]}
    assert groups["data/"] == {"path": "data/", "files": 3, "bytes": 3355, "reason": "ignored by git"}
    assert (groups["./"]["files"], groups["./"]["bytes"]) == (1, 7)
    assert (groups["sub/"]["files"], groups["sub/"]["bytes"]) == (2, 7)
    assert summary["files"] == 3  # train.py, sub/keep.py, .gitignore
    assert [e["path"] for e in summary["left_out"]][0] == "data/"  # biggest first


def test_included_files_leave_the_ignored_summary(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN}, gitignore="data/\n")
    sized(project / "data" / "a.png", 100)
    sized(project / "data" / "b.csv", 50)
    groups = left_out(make_bundle(project, include=["data/*.png"]))
    assert (groups["data/"]["files"], groups["data/"]["bytes"]) == (1, 50)


def test_nested_gitignore_outside_git(home: Path, tmp_path: Path) -> None:
    """Without git, .gitignore files (nested ones too, each for its own folder) still apply."""
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    write(project / ".gitignore", "data/\n")
    write(project / "sub" / ".gitignore", "*.tmp\n!keep.tmp\n")
    sized(project / "data" / "big.bin", 500)
    sized(project / "sub" / "a.tmp", 20)
    sized(project / "sub" / "keep.tmp", 1)
    sized(project / "top.tmp", 2)  # the nested rule does not reach up
    write(project / "sub" / "code.py", "c\n")
    bundle = make_bundle(project)
    assert set(members(bundle)) == {"train.py", ".gitignore", "sub/.gitignore", "sub/keep.tmp",
                                    "top.tmp", "sub/code.py"}
    groups = left_out(bundle)
    assert (groups["data/"]["files"], groups["data/"]["bytes"]) == (1, 500)
    assert (groups["sub/"]["files"], groups["sub/"]["bytes"]) == (1, 20)


def test_nothing_left_out_means_no_hint(home: Path, tmp_path: Path) -> None:
    summary = make_bundle(make_git_project(tmp_path / "p", {"train.py": TRAIN})).summary()
    assert summary == {"files": 1, "bytes": len(TRAIN)}


# -- include -------------------------------------------------------------------------------


@pytest.fixture
def ignored_tree(tmp_path: Path) -> Path:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN},
                               gitignore="build/\ndata/\nexperiments/\n")
    for rel in ("build/lib/m.py", "build/x/y.py", "data/a.png", "data/b.png", "data/c.csv",
                "data/sub/d.png", "experiments/a/out/r.txt", "experiments/b/c/out/s.txt",
                "experiments/a/other/t.txt", "experiments/a/out.txt"):
        write(project / rel, rel)
    write(project / "build" / ".env", marker("build/.env"))
    return project


def test_include_an_ignored_directory_ships_it_whole(home: Path, ignored_tree: Path) -> None:
    bundle = make_bundle(ignored_tree, include=["build"])
    names = set(members(bundle))
    assert {"build/lib/m.py", "build/x/y.py"} <= names
    assert "build/.env" not in names  # but never a credential
    assert not [n for n in names if n.startswith(("data/", "experiments/"))]


def test_include_glob_ships_only_matches(home: Path, ignored_tree: Path) -> None:
    names = set(members(make_bundle(ignored_tree, include=["data/*.png"])))
    assert {n for n in names if n.startswith("data/")} == {"data/a.png", "data/b.png"}


def test_include_double_star_glob(home: Path, ignored_tree: Path) -> None:
    names = set(members(make_bundle(ignored_tree, include=["experiments/**/out"])))
    assert {n for n in names if n.startswith("experiments/")} == {
        "experiments/a/out/r.txt", "experiments/b/c/out/s.txt"}


def test_include_that_matches_nothing_warns(home: Path, ignored_tree: Path) -> None:
    listing = list_project(ignored_tree, include=["models/*.pt"])
    assert any("models/*.pt" in w and "matches no file" in w for w in listing.warnings)


@pytest.mark.parametrize("glob", ["../x", "/etc/passwd", "sub/../../x", "~/.ssh/id_rsa"])
def test_include_leaving_the_project_is_an_error(home: Path, tmp_path: Path, glob: str) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "sub/a.py": "a\n"})
    write(tmp_path / "x", "outside\n")
    with pytest.raises(UserError) as err:
        list_project(project, include=[glob])
    assert repr(glob) in err.value.what
    assert err.value.fix


def test_cli_include_leaving_the_project_exits_2(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    proc = run_gpu("bundle", "--include", "../x", "--json", cwd=project)
    assert proc.returncode == 2
    assert "'../x'" in proc.stderr and "leaves the project" in proc.stderr
    assert json.loads(proc.stdout)["error"] == "include '../x' leaves the project"


def test_empty_include_is_an_error(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    with pytest.raises(UserError, match="empty"):
        list_project(project, include=["  "])


# -- warnings ------------------------------------------------------------------------------


def test_big_file_in_the_bundle_warns_to_use_data(home: Path, tmp_path: Path) -> None:
    """A 101 MB file that would ship gets a warning pointing at --data (sparse: fast)."""
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    with open(project / "weights.bin", "wb") as f:
        f.truncate(101 * 1024 * 1024)
    sized(project / "small.bin", 1024 * 1024)
    listing = list_project(project)
    assert "weights.bin" in listing.entries
    big = [w for w in listing.warnings if "weights.bin" in w]
    assert len(big) == 1 and "data" in big[0]
    assert not [w for w in listing.warnings if "small.bin" in w]


# -- content addressing --------------------------------------------------------------------


def test_unchanged_tree_is_packed_once(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "lib/a.py": "a = 1\n"})
    first = make_bundle(project)
    assert first.packed and first.path.exists()
    stored = bundle_files(home)
    second = make_bundle(project)
    assert second.hash == first.hash and second.path == first.path
    assert second.packed is False
    assert bundle_files(home) == stored


def test_changing_one_file_changes_the_hash(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "lib/a.py": "a = 1\n"})
    first = make_bundle(project)
    (project / "lib" / "a.py").write_text("a = 22\n")
    second = make_bundle(project)
    assert second.hash != first.hash and second.packed
    with tarfile.open(objects.archive(second.hash), "r:gz") as tar:
        assert tar.extractfile("lib/a.py").read() == b"a = 22\n"
    assert bundle_files(home) == {first.path.name, second.path.name}


def test_same_content_elsewhere_has_the_same_hash(home: Path, tmp_path: Path) -> None:
    """The hash is over content, not where the project lives or when it was written."""
    files = {"train.py": TRAIN, "lib/a.py": "a = 1\n"}
    one = make_bundle(make_git_project(tmp_path / "one", files))
    two = make_bundle(make_git_project(tmp_path / "two", files))
    assert one.hash == two.hash and two.packed is False


def test_packed_files_keep_content_and_executable_bit(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "run.sh": "#!/bin/sh\necho hi\n"})
    (project / "run.sh").chmod(0o755)
    bundle = make_bundle(project)
    names = members(bundle)
    assert names["run.sh"].mode & 0o111 and not names["train.py"].mode & 0o111
    with tarfile.open(objects.archive(bundle.hash), "r:gz") as tar:
        assert tar.extractfile("train.py").read() == TRAIN.encode()
    assert bundle.summary()["bytes"] == len(TRAIN) + len("#!/bin/sh\necho hi\n")


@pytest.mark.slow  # submits: the supervisor starts for the job
def test_gpu_bundle_is_a_dry_run_that_writes_nothing(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n", "big.bin": "x" * 200_000})
    for _ in range(5):
        doc = gpu_json("bundle", cwd=project)
        assert doc["files"] == 2
    assert not list(home.glob("bundles/*.json")), "gpu bundle stored an archive"
    # the same hash a submit then stores: the dry run hashed exactly what ships
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    stored = [p.name for p in home.glob("bundles/*.json")]
    assert stored == [f"{doc['hash']}.json"] and sub["bundle"]["files"] == 2


@pytest.mark.slow  # runs the supervisor: end to end
def test_gpu_routers_own_home_never_ships_wherever_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU_ROUTER_HOME inside the project (untracked, not ignored) is not packed: five
    submits from it must not pack the previous bundles into the next."""
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n"})
    state = project / "state"
    monkeypatch.setenv("GPU_ROUTER_HOME", str(state))
    monkeypatch.setenv("GPU_ROUTER_CONFIG", str(tmp_path / "cfg.yaml"))
    try:
        sizes = []
        for i in range(3):
            sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0",
                           "--env", f"RUN={i}", cwd=project)
            sizes.append(sub["bundle"]["files"])
        assert sizes == [1, 1, 1]
        listed = gpu_json("bundle", "--list", cwd=project)["list"]
        assert not any(rel.startswith("state/") for rel in listed)
        left = {item["path"]: item["reason"] for item in gpu_json("bundle", cwd=project)["left_out"]}
        assert any("gpu-router's own state" in why for why in left.values()), left
    finally:
        run_gpu("daemon", "--stop")


@pytest.mark.slow  # submits: the supervisor starts for the job
def test_bundle_and_submit_agree_on_gpu_yaml_include(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {
        "train.py": "print(1)\n", "gpu.yaml": "script: train.py\nhours: 0.1\ninclude: [vendor/]\n"},
        gitignore="vendor/\n")
    (project / "vendor").mkdir()
    (project / "vendor" / "lib.py").write_text("X = 1\n")
    listed = gpu_json("bundle", "--list", cwd=project)
    assert "vendor/lib.py" in listed["list"]
    sub = gpu_json("submit", "--wait-s", "0", cwd=project)
    assert sub["bundle"]["files"] == listed["files"] and sub["job"]["id"]
    assert f"{listed['hash']}.json" in [p.name for p in home.glob("bundles/*.json")]


# -- the report: counts that add up, a hint only where it applies -------------------------


READER = '''
import helpers
from pkg.sub import thing
rows = open("data/train.csv").read()
cfg = open("configs/run.yaml").read()
with open("outputs/model.pkl", "w") as f:
    f.write("m")
'''


def _report_project(tmp_path: Path, script: str) -> Path:
    project = make_git_project(tmp_path / "r", {"train.py": script, "gpu.yaml": "script: train.py\n"},
                               gitignore=".venv/\ndata/\nhelpers.py\npkg/\nconfigs/\noutputs/\n")
    for rel in (".venv/lib/site.py", "data/train.csv", "data/more/b.csv", "helpers.py", "pkg/sub.py",
                "configs/run.yaml", "outputs/model.pkl"):
        write(project / rel, "x\n")
    write(project / ".env", "A=1\n")
    return project


def test_no_hint_when_the_script_refers_to_nothing_left_out(home: Path, tmp_path: Path) -> None:
    doc = gpu_json("bundle", cwd=_report_project(tmp_path, TRAIN))
    assert {e["path"] for e in doc["left_out"]} >= {".venv/", "data/", "./", ".env"}
    assert "hint" not in doc
    assert "hint:" not in run_gpu("bundle", cwd=tmp_path / "r").stdout


@pytest.mark.slow  # submits: the supervisor starts for the job
def test_the_hint_names_what_the_script_uses(home: Path, tmp_path: Path) -> None:
    project = _report_project(tmp_path, READER)
    hint = gpu_json("bundle", cwd=project)["hint"]
    assert "train.py refers to data/, which did not ship (ignored by git): pass it as data (`--data data=data`" in hint
    assert "train.py refers to helpers.py" in hint and "`include: [helpers.py]`" in hint
    assert "train.py refers to pkg/" in hint and "configs/" in hint
    assert ".venv" not in hint
    assert "outputs/" in hint  # written, but not declared as an output: it could be read too
    (project / "gpu.yaml").write_text("script: train.py\noutputs: [outputs/]\n")
    assert "outputs/" not in gpu_json("bundle", cwd=project)["hint"]  # declared: the job writes it
    # the same hint at submit, in the contract's bundle object
    sub = gpu_json("submit", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert "train.py refers to data/" in sub["bundle"]["hint"]


def test_a_referenced_credential_gets_the_keychain_advice(home: Path, tmp_path: Path) -> None:
    project = _report_project(tmp_path, "print(open('.env').read())\n")
    hint = gpu_json("bundle", cwd=project)["hint"]
    assert "train.py refers to .env, which did not ship (withheld: credential file" in hint
    assert "gpu secrets set NAME" in hint and "include" not in hint


def test_left_out_counts_match_the_files(home: Path, tmp_path: Path) -> None:
    """Every left-out row counts the files it names; together they are every file that did
    not ship (git's own folder aside)."""
    project = _report_project(tmp_path, READER)
    write(project / "keys" / "id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n")
    doc = gpu_json("bundle", "--list", cwd=project)
    on_disk = {p.relative_to(project).as_posix() for p in project.rglob("*")
               if p.is_file() and ".git" not in p.relative_to(project).parts}
    assert sum(e["files"] for e in doc["left_out"]) == len(on_disk - set(doc["list"]))
    rows = {e["path"]: e for e in doc["left_out"]}
    assert (rows[".env"]["files"], rows[".env"]["bytes"]) == (1, 4)
    assert rows["keys/id_rsa"]["files"] == 1 and "credential" in rows["keys/id_rsa"]["reason"]
    assert (rows["data/"]["files"], rows["data/"]["bytes"]) == (2, 4)
    table = run_gpu("bundle", cwd=project).stdout
    assert re.search(r"^\.env\s+1\s+4 B\s+withheld", table, re.M), table


def test_the_readme_quickstart_ships_only_itself(home: Path) -> None:
    """The quickstart sits inside gpu-router's repository; `ship: project` keeps the rest home."""
    from tests.conftest import EXAMPLE

    doc = gpu_json("bundle", "--list", cwd=EXAMPLE)
    assert doc["root"] == str(EXAMPLE.resolve())
    assert set(doc["list"]) == {"train.py", "requirements.txt", "gpu.yaml"}


@pytest.mark.slow  # runs the supervisor: end to end
def test_ship_project_keeps_the_rest_of_the_repository_home(home: Path, tmp_path: Path) -> None:
    repo = make_git_project(tmp_path / "mono", {"lib/shared.py": "S = 1\n", "app/train.py": TRAIN,
                                                "app/notes.md": "n\n", "app/tmp.log": "l\n"},
                            gitignore="*.log\n")
    whole = gpu_json("bundle", "--list", cwd=repo / "app")
    assert "lib/shared.py" in whole["list"] and whole["root"] == str(repo.resolve())
    (repo / "app" / "gpu.yaml").write_text("script: train.py\nship: project\n")
    alone = gpu_json("bundle", "--list", cwd=repo / "app")
    assert set(alone["list"]) == {"train.py", "notes.md", "gpu.yaml"}  # the repo's .gitignore still rules
    sub = gpu_json("submit", "--hours", "0.1", "--wait-s", "0", cwd=repo / "app")
    assert sub["bundle"]["files"] == 3
    (repo / "app" / "gpu.yaml").write_text("script: ../lib/shared.py\nship: project\n")
    proc = run_gpu("submit", "--hours", "0.1", "--json", cwd=repo / "app")
    assert proc.returncode == 2 and "outside the project" in proc.stderr
    (repo / "app" / "gpu.yaml").write_text("script: train.py\nship: everything\n")
    proc = run_gpu("bundle", cwd=repo / "app")
    assert proc.returncode == 2 and "gpu.yaml:2" in proc.stderr and "project" in proc.stderr


# -- the listing's git commands, started ahead (core.packaging.listing.begin) ----------------


def _git_children() -> list[int]:
    """This process's child processes that run git (zombies too: a run left unreaped)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                after = f.read().rsplit(")", 1)[1].split()
            comm = Path(f"/proc/{entry.name}/comm").read_text().strip()
        except OSError:
            continue
        if int(after[1]) == os.getpid() and comm == "git":
            found.append(int(entry.name))
    return found


def test_a_listing_begun_early_is_the_same_listing(home: Path, tmp_path: Path) -> None:
    from core.packaging.listing import begin

    project = make_git_project(tmp_path / "p", {"train.py": TRAIN, "lib/a.py": "a = 1\n",
                                                "id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\n"},
                               gitignore="data/\n")
    write(project / "data" / "big.bin", "x")
    write(project / "untracked.py", "u = 1\n")
    plain = list_project(project)
    begun = begin(project)
    assert begun is not None
    early = list_project(project, begun=begun)
    assert sorted(early.entries) == sorted(plain.entries) == [".gitignore", "lib/a.py", "train.py", "untracked.py"]
    assert early.withheld == plain.withheld and early.ignored == plain.ignored
    assert _git_children() == []  # read and reaped
    # runs begun for another folder are not read for this one; whoever began closes them
    other = make_git_project(tmp_path / "other", {"o.py": "o = 1\n"})
    stray = begin(other)
    assert sorted(list_project(project, begun=stray).entries) == sorted(plain.entries)
    stray.close()
    assert _git_children() == []
    assert begin(tmp_path / "not-git") is None


def test_a_submit_its_checks_refuse_leaves_no_git_running(home: Path, tmp_path: Path) -> None:
    """The listing's git starts before the checks; a refused submit stops and reaps it."""
    from core.config.request import build_request
    from core.engine.service import prepare

    project = make_git_project(tmp_path / "p", {"train.py": TRAIN})
    req = build_request(project, {"script": "train.py", "hours": 0.1, "provider": "colab"})
    with pytest.raises(UserError) as refused:
        prepare(req)
    assert "colab" in refused.value.message()
    assert _git_children() == []


@pytest.mark.parametrize("folder,rel", [(".docker", "config.json"), (".m2", "settings.xml"),
                                        (".cursor", "mcp.json"), (".config", "gcloud/credentials.db"),
                                        (".config", "hub")])
def test_a_rule_across_the_root_folder_still_holds(home: Path, tmp_path: Path, folder: str, rel: str) -> None:
    """A credential rule of a folder and its file (`.docker/config.json`) holds when that folder
    is the repository's root (a dotfiles repository at ~/.docker) or the project of
    `ship: project`: the rules read the whole path, not the path below the root."""
    repo = make_git_project(tmp_path / folder, {rel: marker(rel) + "\n", "train.py": TRAIN})
    listing = list_project(repo)
    assert rel not in listing.entries and "train.py" in listing.entries
    assert any(w["path"] == rel and "credential" in w["reason"] for w in listing.withheld), listing.withheld
    outer = make_git_project(tmp_path / "outer", {f"{folder}/{rel}": marker(rel) + "\n", f"{folder}/train.py": TRAIN})
    project = outer / folder
    for ship in ("project", "repo"):
        got = list_project(project, ship=ship)
        shipped = {e.rel for e in got.entries.values()}
        assert rel not in shipped and f"{folder}/{rel}" not in shipped, (ship, shipped)
        assert "train.py" in shipped or f"{folder}/train.py" in shipped
