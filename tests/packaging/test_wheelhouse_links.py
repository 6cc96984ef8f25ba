"""A project's own `--find-links` folder (`--no-index`, `--find-links vendor`: wheels or sdists
the project ships) for a target that installs from a wheelhouse (an ssh/Slurm/PBS host with
`offline`, a Kaggle kernel without internet).

The wheelhouse is built on this machine, where pip runs in the wheelhouse's work folder inside
bubblewrap (core/packaging/buildbox.py): the project's `vendor` is not there and not readable,
and pip failed with "no wheel and no source". The folder's files, as shipped in the job's
bundle, are copied into the work folder (already readable in the sandbox) and pip is pointed
there; the wheelhouse's cache key holds the folder's content hash, so a changed vendor folder
builds anew while projects without local folders keep their keys.

Real sshd (tests/conftest.py), real bubblewrap and pip; the fake Kaggle on 127.0.0.1:80 runs its
offline kernels in their own network namespace. No index at all: `--no-index` everywhere, and
the host's pip is pointed at a dead index besides.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.packaging import buildbox, wheelhouse
from core.providers.kaggle.deps import KAGGLE_PLATFORM
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state, write_user_config
from tests.pyindex import PackageIndex
from tests.providers.test_kaggle import add_kaggle, kaggle  # noqa: F401 - the fake Kaggle fixture, on port 80

USES = '''
import gpu, pkg
(gpu.output_dir() / "got.txt").write_text(str(pkg.X))
print("imported pkg", pkg.X, flush=True)
'''
REQUIREMENTS = "--no-index\n--find-links vendor\npkg==1.0\n"


def vendored_project(tmp_path: Path, name: str, kind: str, x: int = 7) -> Path:
    """A git project whose `vendor/` holds pkg 1.0 as a wheel or an sdist (with an in-tree
    backend: no index needed to build it), plus an unrelated file the copy must leave out."""
    layout = PackageIndex(tmp_path / f"layout-{name}")  # only to write the package file
    try:
        if kind == "wheel":
            made = layout.add_wheel("pkg", "1.0", {"pkg/__init__.py": f"X = {x}\n"})
        else:
            made = layout.add_sdist("pkg", "1.0", {"pkg/__init__.py": f"X = {x}\n"})
    finally:
        layout.close()
    project = make_git_project(tmp_path / name, {"train.py": USES, "requirements.txt": REQUIREMENTS,
                                                 "notes/big.txt": "not a package\n"})
    (project / "vendor").mkdir()
    shutil.copy(made, project / "vendor" / made.name)
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "vendor"], check=True)
    return project


@pytest.fixture
def no_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's pip reads no index and no config of the person's: only `vendor` can serve."""
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


def _events(short: str) -> list[str]:
    return [e["reason"] for e in gpu_json("status", short, "--verbose")["events"]]


# -- an ssh host with offline: true -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_an_offline_host_installs_from_the_project_s_vendor_folder(sshd, no_index: None, home: Path,
                                                                    tmp_path: Path, kind: str) -> None:
    """`--no-index --find-links vendor` on an ssh host with `offline: true`: the wheelhouse
    built here finds pkg in the project's vendor folder (a wheel as is; an sdist built in the
    sandbox), and the job imports it on the host."""
    from tests.providers.test_host_offline import PYTHON, dead_index

    root = tmp_path / "remote"
    box = {"kind": "ssh", **sshd.target_options(root, PYTHON), "offline": True,
           "env": {"PIP_INDEX_URL": dead_index()}}
    write_user_config(json.dumps({"targets": {"box": box}}))
    project = vendored_project(tmp_path, "p", kind)
    sub = gpu_json("submit", "train.py", "--provider", "box", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=240)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", log + json.dumps(done)
    assert "imported pkg 7" in log
    assert (Path(sub["job"]["outputs_dir"]) / "got.txt").read_text() == "7"
    said = _events(short)
    assert any("wheelhouse ready" in e for e in said), said
    ready = list((root / "wheelhouse").glob("*.ready"))
    assert len(ready) == 1
    shipped = sorted(p.name for p in (root / "wheelhouse" / ready[0].name[:-len(".ready")]).iterdir())
    assert shipped == ["pkg-1.0-py3-none-any.whl"], shipped  # the wheel, or the sdist built here


# -- Kaggle -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_offline_kaggle_kernel_installs_from_the_project_s_vendor_folder(kaggle, no_index: None, home: Path,
                                                                              tmp_path: Path) -> None:
    """The same project on Kaggle without internet: the wheelhouse for Kaggle's image is built
    here from the vendor folder's sdist, shipped as a data set, installed offline."""
    add_kaggle(tmp_path)
    project = vendored_project(tmp_path, "k", "sdist")
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=300)
    assert done["state"] == "done", run_gpu("logs", short).stdout + json.dumps(done)
    assert (Path(sub["job"]["outputs_dir"]) / "got.txt").read_text() == "7"
    pushes = [b for b in kaggle.bodies("SaveKernel") if b["slug"].endswith(f"gr-{short}-a1")]
    assert pushes[-1]["enableInternet"] is False
    assert len([b for b in kaggle.bodies("CreateDataset") if b["slug"].startswith("gr-wh-")]) == 1


# -- no target needed -------------------------------------------------------------------------


def test_the_cache_key_holds_the_local_folders_and_nothing_else_changes() -> None:
    """A changed vendor folder (its content hash) is a new wheelhouse; no local folder (or an
    empty mapping) leaves every existing key as it was; the order of the folders does not count."""
    args = (["pkg==1.0"], [], ["--no-index", "--find-links", "vendor"], KAGGLE_PLATFORM, {})
    before = wheelhouse.cache_key(*args)
    assert wheelhouse.cache_key(*args, local={}) == before
    assert wheelhouse.cache_key(*args, local=None) == before
    one = wheelhouse.cache_key(*args, local={"vendor": "a" * 64})
    assert one != before
    assert wheelhouse.cache_key(*args, local={"vendor": "a" * 64}) == one
    assert wheelhouse.cache_key(*args, local={"vendor": "b" * 64}) not in (before, one)
    both = wheelhouse.cache_key(*args, local={"vendor": "a" * 64, "more": "c" * 64})
    assert wheelhouse.cache_key(*args, local={"more": "c" * 64, "vendor": "a" * 64}) == both
    # the key of a project without local folders is the one every earlier release wrote
    import hashlib

    doc = {"requirements": ["pkg==1.0"], "constraints": [], "pip_args": ["--no-index", "--find-links", "vendor"],
           "platform": KAGGLE_PLATFORM.to_json(), "image": []}
    assert before == hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def _deps(project: Path):
    from core.packaging import objects, requirements
    from core.packaging.bundle import make_bundle

    bundle = make_bundle(project)
    manifest = objects.manifest_file(bundle.hash)
    return requirements.bundle_dependencies(manifest, ""), manifest


def test_a_changed_vendor_folder_builds_a_new_wheelhouse_and_only_its_files_are_copied(
        home: Path, no_index: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Built from the bundle: the first build copies vendor's files (and nothing else of the
    bundle) into the work folder; the same bundle again is the cache; a new wheel in vendor
    (same name, other content) is a new key and a new wheelhouse holding the new wheel."""
    project = vendored_project(tmp_path, "u", "wheel", x=1)
    found, manifest = _deps(project)
    assert found is not None and list(found.local) == ["vendor"]
    copied: list[list[str]] = []
    real = wheelhouse._copy_folder

    def spy(manifest_: Path, rel: str, digest: str, dest: Path) -> None:
        real(manifest_, rel, digest, dest)
        copied.append(sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")))

    monkeypatch.setattr(wheelhouse, "_copy_folder", spy)
    steps: list[buildbox.Step] = []
    real_run = buildbox.run

    def record(step: buildbox.Step, python: str = sys.executable):  # noqa: ANN202 - buildbox.run's
        steps.append(step)
        return real_run(step, python)

    monkeypatch.setattr(buildbox, "run", record)
    links = wheelhouse.LocalFolders(manifest=manifest, workdir="", hashes=dict(found.local))
    pip_args = ["--no-index", "--find-links", "vendor"]
    first = wheelhouse.build(found.requirements, [], pip_args, KAGGLE_PLATFORM, {}, say=lambda _t: None,
                             local=links)
    assert first.files == ["pkg-1.0-py3-none-any.whl"] and first.built_now
    assert copied == [["pkg-1.0-py3-none-any.whl"]]  # vendor's wheel only: not train.py, not notes/
    # every pip step read the copy inside the work folder, with no network (--no-index, local only)
    assert steps and not any(st.network for st in steps)
    assert any(a.endswith("/links/0") for st in steps for a in st.command)
    again = wheelhouse.build(found.requirements, [], pip_args, KAGGLE_PLATFORM, {}, say=lambda _t: None,
                             local=links)
    assert again.key == first.key and not again.built_now and len(copied) == 1  # cached: nothing copied

    layout = PackageIndex(tmp_path / "layout-new")
    try:
        made = layout.add_wheel("pkg", "1.0", {"pkg/__init__.py": "X = 2\n"})
    finally:
        layout.close()
    shutil.copy(made, project / "vendor" / made.name)
    subprocess.run(["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                    "commit", "-qam", "new wheel"], check=True)
    found2, manifest2 = _deps(project)
    links2 = wheelhouse.LocalFolders(manifest=manifest2, workdir="", hashes=dict(found2.local))
    second = wheelhouse.build(found2.requirements, [], pip_args, KAGGLE_PLATFORM, {}, say=lambda _t: None,
                              local=links2)
    assert second.key != first.key and second.built_now and len(copied) == 2
    assert second.content_hash != first.content_hash  # the new wheel, not the old one
