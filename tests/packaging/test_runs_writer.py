"""Writes under the project's runs/ never follow a link an agent planted (issue 36, item 3).

An agent that may write only in the project can plant links there; gpu-router writes with all
of the person's rights. Each example the issue names is a test here, through the engine's own
writers (bringing a local job home, job.json, the settled checkpoint, `gpu fetch`), and a
property test plants any tree of links, folders and files under runs/ and checks that no write
lands outside runs/<id>/ and nothing outside changes. A refusal keeps the outputs at home, in
the job's folder, with an event that says why and where.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core import paths
from core.jobs.store import Job, Store

PIN_CONFIG = "approval:\n  pin_hash: sha256:the-persons-pin\n"


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root` (not following links): kind, content hash or link target."""
    out: dict[str, tuple] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(top) / name
            st_ = p.lstat()
            if stat.S_ISLNK(st_.st_mode):
                out[str(p.relative_to(root))] = ("link", os.readlink(p))
            elif stat.S_ISREG(st_.st_mode):
                out[str(p.relative_to(root))] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[str(p.relative_to(root))] = ("dir" if stat.S_ISDIR(st_.st_mode) else "other",)
    return out


def _job(store: Store, project: Path, n: int = 1) -> Job:
    jid = f"{n:032x}"
    return store.insert_job({
        "id": jid, "short_id": jid[:8], "name": "t", "provider": "local", "project_dir": str(project),
        "outputs_dir": str(project / "runs" / jid[:8]), "fingerprint": f"fp{n}",
        "request": {"script": "train.py"}, "plan": {}, "bundle": {}, "handle": {}},
        reason="test", actor="test")


def _local_job_wrote(job: Job, files: dict[str, str]) -> None:
    """What a local job leaves in its folder: out/ files, its log, its metrics."""
    jdir = paths.jobs_dir() / job.id
    for rel, text in files.items():
        (jdir / "out" / rel).parent.mkdir(parents=True, exist_ok=True)
        (jdir / "out" / rel).write_text(text)
    (jdir / "job.log").write_text("step 1\n")
    (jdir / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')


def _end(store: Store, job: Job) -> list[str]:
    """The engine's end of a job, as far as it writes into runs/: outputs, then job.json."""
    from core.engine.jobfiles import bring_home
    from core.engine.jobreport import write_job_json
    from core.providers.local import LocalProvider

    notes = asyncio.run(bring_home(store, job, LocalProvider()))
    write_job_json(store, store.get(job.id))
    return notes


def _kept(store: Store, job: Job) -> Path:
    """Where the engine says the outputs are kept, from the job's status and its events."""
    from core.engine.jobreport import job_report

    doc = job_report(store, store.get(job.id))
    kept = Path(doc["outputs_kept"]["dir"])
    assert kept == paths.jobs_dir() / job.id / "outputs-kept"
    said = [e.reason for e in store.events(job.id) if "kept" in e.reason]
    assert said and str(kept) in said[0] and "a link" in said[0], said
    return kept


# -- the examples -----------------------------------------------------------------


def test_a_runs_id_link_to_the_config_folder_leaves_the_config_alone(home: Path, tmp_path: Path) -> None:
    config_dir = tmp_path / "dot-config" / "gpu-router"
    config_dir.mkdir(parents=True)
    (config_dir / "config.yaml").write_text(PIN_CONFIG)
    before = _snapshot(tmp_path / "dot-config")
    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)
    store = Store()
    job = _job(store, project)
    os.symlink(config_dir, project / "runs" / job.short_id)  # the agent's link
    _local_job_wrote(job, {"config.yaml": "approval: {}\n", "model.pkl": "weights"})

    _end(store, job)

    assert (config_dir / "config.yaml").read_text() == PIN_CONFIG  # the PIN is still there
    assert _snapshot(tmp_path / "dot-config") == before  # no job.log, metrics.jsonl, job.json
    kept = _kept(store, job)
    assert (kept / "config.yaml").read_text() == "approval: {}\n"  # nothing lost
    assert (kept / "model.pkl").read_text() == "weights"
    assert (kept / "job.log").read_text() == "step 1\n"
    assert (kept / "metrics.jsonl").exists() and (kept / "job.json").exists()
    assert json.loads((kept / "job.json").read_text())["job"]["outputs_kept"]["dir"] == str(kept)
    from rich.console import Console

    from tui.show.render import status_panel

    shown = Console(width=300, record=True, file=open(os.devnull, "w"))
    shown.print(status_panel(store.get(job.id), store.events(job.id), {}))
    assert f"{kept}  (kept at home: {project / 'runs' / job.short_id} is a link" in shown.export_text()
    from core.engine.reports import artifacts_doc

    listed = artifacts_doc(store.get(job.id))  # `gpu outputs` lists them where they are
    assert listed["outputs_dir"] == str(kept) and "model.pkl" in {f["path"] for f in listed["files"]}


def test_a_runs_id_link_to_ssh_does_not_replace_authorized_keys(home: Path, tmp_path: Path) -> None:
    ssh = tmp_path / "dot-ssh"
    ssh.mkdir()
    (ssh / "authorized_keys").write_text("ssh-ed25519 AAAA the-persons-key\n")
    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)
    store = Store()
    job = _job(store, project)
    os.symlink(ssh, project / "runs" / job.short_id)
    _local_job_wrote(job, {"authorized_keys": "ssh-ed25519 AAAA the-agents-key\n"})

    _end(store, job)

    assert (ssh / "authorized_keys").read_text() == "ssh-ed25519 AAAA the-persons-key\n"
    assert sorted(p.name for p in ssh.iterdir()) == ["authorized_keys"]
    assert "the-agents-key" in (_kept(store, job) / "authorized_keys").read_text()


def test_a_runs_folder_that_is_a_link_is_refused_too(home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    os.symlink(elsewhere, project / "runs")
    store = Store()
    job = _job(store, project)
    _local_job_wrote(job, {"model.pkl": "weights"})

    _end(store, job)

    assert list(elsewhere.iterdir()) == []  # not even runs/.gitignore or the job's folder
    assert (_kept(store, job) / "model.pkl").read_text() == "weights"


def test_a_project_that_cannot_be_written_keeps_the_outputs_at_home(home: Path, tmp_path: Path) -> None:
    """The project is gone (a file now has its name): the outputs are kept, not lost."""
    project = tmp_path / "project"
    store = Store()
    job = _job(store, project)
    project.write_text("not a folder any more")
    _local_job_wrote(job, {"model.pkl": "weights"})

    notes = _end(store, job)

    kept = store.get(job.id).handle["outputs_kept"]
    assert "not writable" in kept["why"] and not notes
    assert (Path(kept["dir"]) / "model.pkl").read_text() == "weights"
    assert (Path(kept["dir"]) / "job.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder of another user needs root")
def test_a_runs_id_folder_of_another_user_is_refused(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    store = Store()
    job = _job(store, project)
    runs = project / "runs" / job.short_id
    runs.mkdir(parents=True)
    os.chown(runs, 65534, 65534)
    _local_job_wrote(job, {"model.pkl": "weights"})

    _end(store, job)

    assert list(runs.iterdir()) == []
    doc = store.get(job.id).handle["outputs_kept"]
    assert "owned by another user (uid 65534)" in doc["why"]
    assert (Path(doc["dir"]) / "model.pkl").read_text() == "weights"


def test_a_planted_job_json_tmp_link_is_not_written_through(home: Path, tmp_path: Path) -> None:
    from core.engine.jobreport import write_job_json

    victim = tmp_path / "dot-bashrc"
    victim.write_text("alias ls='ls --color'\n")
    project = tmp_path / "project"
    store = Store()
    job = _job(store, project)
    runs = project / "runs" / job.short_id
    runs.mkdir(parents=True)
    os.symlink(victim, runs / "job.json.tmp")
    os.symlink(tmp_path / "dot-profile", runs / "job.json")  # a dangling one where it lands

    write_job_json(store, job)

    assert victim.read_text() == "alias ls='ls --color'\n"
    assert not (tmp_path / "dot-profile").exists()
    assert not (runs / "job.json").is_symlink()
    assert json.loads((runs / "job.json").read_text())["job"]["id"] == job.id


def test_a_planted_gitignore_link_in_runs_is_left_alone(home: Path, tmp_path: Path) -> None:
    from core.engine.jobfiles import ignore_runs

    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)
    os.symlink(tmp_path / "dot-profile", project / "runs" / ".gitignore")  # dangling
    ignore_runs(project / "runs")
    assert not (tmp_path / "dot-profile").exists()
    ignore_runs(tmp_path / "fresh" / "runs")  # a first use still makes it
    assert (tmp_path / "fresh" / "runs" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_a_folder_link_inside_runs_id_is_not_followed(home: Path, tmp_path: Path) -> None:
    """A link below runs/<id>/ (where an output folder goes) is replaced, never written through."""
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    store = Store()
    job = _job(store, project)
    runs = project / "runs" / job.short_id
    runs.mkdir(parents=True)
    os.symlink(outside, runs / "plots")
    os.symlink(outside / "log", runs / "job.log")
    _local_job_wrote(job, {"plots/a.png": "png"})

    _end(store, job)

    assert list(outside.iterdir()) == []
    assert (runs / "plots" / "a.png").read_text() == "png" and not (runs / "plots").is_symlink()
    assert (runs / "job.log").read_text() == "step 1\n" and not (runs / "job.log").is_symlink()


def test_the_settled_checkpoint_is_kept_at_home_when_runs_id_is_a_link(home: Path, tmp_path: Path) -> None:
    from core.engine.jobfiles import settle_checkpoint
    from core.packaging import checkpoints
    from core.packaging.checkpoints.home import manifest_path, write_json

    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)
    store = Store()
    job = _job(store, project)
    os.symlink(outside, project / "runs" / job.short_id)
    ckpt = checkpoints.home_dir(job.id)
    ckpt.mkdir(parents=True)
    (ckpt / "model.pt").write_bytes(b"w" * 10)
    digest = hashlib.sha256(b"w" * 10).hexdigest()
    write_json(manifest_path(job.id), {
        "generation": 1, "bytes": 10, "at": 0,
        "files": {"model.pt": {"size": 10, "mtime_ns": 0, "sha256": digest}}})

    assert settle_checkpoint(store, job) is None

    assert list(outside.iterdir()) == []
    kept = _kept(store, job)
    assert (kept / "checkpoint" / "model.pt").read_bytes() == b"w" * 10
    info = checkpoints.settled(job.id, kept)  # a resume finds it where it was kept
    assert info is not None and info["files"] == 1


def test_a_checkpoint_folder_planted_as_a_link_is_not_reclaimed(home: Path, tmp_path: Path) -> None:
    """A resume moves runs/<id>/checkpoint/ back home: a link there is refused, not moved."""
    from core.errors import UserError
    from core.packaging import checkpoints
    from core.packaging.checkpoints.home import write_json
    from core.packaging.checkpoints.settling import _settled_path

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.pt").write_bytes(b"w" * 10)
    project = tmp_path / "project"
    runs = project / "runs" / "00000000"
    runs.mkdir(parents=True)
    os.symlink(outside, runs / "checkpoint")
    jid = f"{1:032x}"
    (paths.jobs_dir() / jid).mkdir(parents=True)
    write_json(_settled_path(jid), {
        "generation": 1, "bytes": 10, "at": 0, "files": {
            "model.pt": {"size": 10, "mtime_ns": 0, "sha256": hashlib.sha256(b"w" * 10).hexdigest()}}})
    with pytest.raises(UserError) as err:
        checkpoints.reclaim(jid, runs)
    assert "a link" in err.value.what
    assert (outside / "model.pt").read_bytes() == b"w" * 10 and (runs / "checkpoint").is_symlink()


# -- any tree an agent plants -------------------------------------------------------------

NAMES = ["runs", "runs/j", "runs/j/job.json", "runs/j/job.json.tmp", "runs/j/job.log",
         "runs/j/metrics.jsonl", "runs/j/sub", "runs/j/sub/x.txt", "runs/j/checkpoint",
         "runs/.gitignore", "runs/j/a.txt", "runs/.j.extract-0"]
KINDS = ["dir", "file", "link-dir", "link-file", "link-dangling", "link-up"]


@st.composite
def planted(draw: st.DrawFn) -> list[tuple[str, str]]:
    """Some of NAMES, each planted as a folder, a file, or a link (to a folder outside, a file
    outside, a missing name outside, `..`): in order, so a later one may sit in an earlier."""
    picks = draw(st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(KINDS)), max_size=7,
                          unique_by=lambda t: t[0]))
    for folder in ("runs", "runs/j"):  # mostly there as plain folders, so deeper plants take
        if folder not in {rel for rel, _ in picks} and draw(st.integers(0, 3)):
            picks.append((folder, "dir"))
    return sorted(picks, key=lambda t: t[0].count("/"))


def _plant(project: Path, outside: Path, tree: list[tuple[str, str]]) -> None:
    for rel, kind in tree:
        p = project / rel
        try:
            if kind == "dir":
                p.mkdir()
            elif kind == "file":
                p.write_text("planted")
            elif kind == "link-dir":
                os.symlink(outside / "folder", p)
            elif kind == "link-file":
                os.symlink(outside / "folder" / "victim.txt", p)
            elif kind == "link-dangling":
                os.symlink(outside / "folder" / "new", p)
            else:
                os.symlink("..", p)
        except OSError:
            pass  # its parent is not a folder here: not planted


def _write_everything(project: Path, home_dir: Path) -> str:
    """Every writer of runs/<id>/ by turn, as the engine calls them; what each did."""
    from core.engine.jobfiles import ignore_runs
    from core.packaging import runswriter
    from core.packaging.safe_extract import safe_copy_tree

    dest = project / "runs" / "j"
    said = []
    src = home_dir / "job"
    for rel, text in {"out/a.txt": "A", "out/sub/x.txt": "X", "out/job.json": "J", "job.log": "L",
                      "metrics.jsonl": "M"}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    ckpt = home_dir / "ckpt-home"
    ckpt.mkdir()
    (ckpt / "model.pt").write_text("W")
    steps = [
        lambda: ignore_runs(project / "runs"),
        lambda: safe_copy_tree(src / "out", dest),
        lambda: safe_copy_tree(src, dest, only=("job.log", "metrics.jsonl")),
        lambda: runswriter.open_folder(dest).__enter__().write("job.json", b"{}"),
        lambda: runswriter.open_folder(dest).__enter__().move_in(ckpt, "checkpoint"),
    ]
    for step in steps:
        try:
            step()
            said.append("ok")
        except runswriter.Refused as exc:
            said.append(f"refused: {exc}")
        except OSError as exc:
            said.append(f"error: {exc}")
    return "; ".join(said)


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(planted())
def test_no_write_under_runs_lands_outside_runs_id(tree: list[tuple[str, str]]) -> None:
    """For any tree of links, folders and files under runs/: nothing outside the project
    changes, and in the project nothing changes but runs/<id>/ (a real folder) and runs/'s
    ignore file; what the agent planted outside runs/<id>/ stays as it was."""
    base = Path(tempfile.mkdtemp(prefix="runs-writer-"))
    try:
        outside = base / "outside"
        (outside / "folder").mkdir(parents=True)
        (outside / "folder" / "victim.txt").write_text("the person's file")
        project = base / "project"
        project.mkdir()
        (project / "train.py").write_text("print(1)\n")
        gpu_home = base / "home"
        gpu_home.mkdir()
        _plant(project, outside, tree)
        before_out = _snapshot(outside)
        before_home = _snapshot(gpu_home)
        before = _snapshot(project)

        what = _write_everything(project, gpu_home)

        assert _snapshot(outside) == before_out, (tree, what)
        after = _snapshot(project)
        runs_real = (project / "runs").is_dir() and not (project / "runs").is_symlink()
        job_real = runs_real and (project / "runs" / "j").is_dir() and not (project / "runs" / "j").is_symlink()
        for rel in set(before) | set(after):
            if before.get(rel) == after.get(rel):
                continue
            inside_job = job_real and (rel == "runs/j" or rel.startswith("runs/j/"))
            ignore = runs_real and rel == "runs/.gitignore" and rel not in before
            made = rel in ("runs", "runs/j") and rel not in before
            assert inside_job or ignore or made, (rel, before.get(rel), after.get(rel), tree, what)
        assert not [r for r in after if r.startswith("runs/.j.extract-") and r not in before], (after, what)
        if job_real:  # written where it may be: all of it is there
            j = project / "runs" / "j"
            assert (j / "a.txt").read_text() == "A" and (j / "sub" / "x.txt").read_text() == "X"
            assert (j / "job.json").read_text() == "{}" and (j / "job.log").read_text() == "L"
        else:
            assert "refused" in what, (tree, what)
        # the checkpoint is in runs/<id>/checkpoint/ or still at home: never lost
        at_home = (gpu_home / "ckpt-home" / "model.pt").is_file()
        settled = job_real and (project / "runs" / "j" / "checkpoint" / "model.pt").is_file() \
            and not (project / "runs" / "j" / "checkpoint").is_symlink()
        assert at_home != settled, (tree, what)
        assert _snapshot(gpu_home).keys() >= {k for k in before_home if not k.startswith("ckpt-home")}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_checkpoint_crosses_disks_by_copy_without_following_links(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Home and the project on two disks: the move into runs/<id>/ and back is a copy (times
    kept, links not followed), then the source is removed."""
    from core.packaging import runswriter
    from tests.conftest import rename_across_disks

    rename_across_disks(monkeypatch)
    (tmp_path / "secret.txt").write_text("not for runs/")
    src = tmp_path / "home" / "ckpt-home"
    (src / "sub").mkdir(parents=True)
    (src / "model.pt").write_bytes(b"weights")
    os.utime(src / "model.pt", ns=(1_000_000_000, 2_000_000_000))
    (src / "sub" / "opt.pt").write_bytes(b"adam")
    os.symlink(tmp_path / "secret.txt", src / "sub" / "leak")
    dest = tmp_path / "project" / "runs" / "j"
    with runswriter.open_folder(dest) as folder:
        folder.move_in(src, "checkpoint")
    got = dest / "checkpoint"
    assert (got / "model.pt").read_bytes() == b"weights" and (got / "model.pt").stat().st_mtime_ns == 2_000_000_000
    assert (got / "sub" / "opt.pt").read_bytes() == b"adam" and not os.path.lexists(got / "sub" / "leak")
    assert not src.exists() and not [p for p in dest.iterdir() if p.name != "checkpoint"]
    back = tmp_path / "home" / "again"
    with runswriter.open_folder(dest, make=False) as folder:
        folder.move_out("checkpoint", back)
    assert (back / "sub" / "opt.pt").read_bytes() == b"adam" and not got.exists()


def test_a_remote_job_comes_home_through_the_writer_too(home: Path, tmp_path: Path) -> None:
    """A host's outputs archive, metrics file and the log mirror (core/providers/remotefetch.py):
    with runs/<id>/ a link to ~/.ssh, authorized_keys stays the person's and all of it is kept."""
    from core.engine.jobfiles import bring_home

    host, ssh, project, job = _host_with_a_linked_runs_id(tmp_path)
    store = Store()
    asyncio.run(bring_home(store, job, host))

    assert (ssh / "authorized_keys").read_text() == "the-persons-key\n"
    assert sorted(p.name for p in ssh.iterdir()) == ["authorized_keys"]
    kept = _kept(store, job)
    assert (kept / "authorized_keys").read_text() == "the-agents-key\n"
    assert (kept / "job.log").read_text() == "step 1\n" and (kept / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert [p.name for p in (project / "runs").glob(".*")] == [".gitignore"]  # no archive or staging


def test_a_host_writes_its_log_and_metrics_only_through_the_writer(home: Path, tmp_path: Path) -> None:
    """Outputs over the cap stay on the host, yet the metrics file and the log still come: into
    a runs/<id>/ that is a link, they are refused (the engine then keeps them at home)."""
    from core.packaging import runswriter

    host, ssh, project, job = _host_with_a_linked_runs_id(tmp_path, options={"max_output_bytes": 1})
    with pytest.raises(runswriter.Refused):
        asyncio.run(host.fetch_outputs(job, project / "runs" / job.short_id))
    assert sorted(p.name for p in ssh.iterdir()) == ["authorized_keys"]


def _host_with_a_linked_runs_id(tmp_path: Path, options: dict | None = None):
    """A host (this machine through LocalTransport, as tests/providers/test_ssh.py's twin) whose job wrote
    out/authorized_keys, a log and metrics; the project's runs/<id> is a link to ~/.ssh."""
    from core.providers.remotefetch import RemoteFetch
    from core.transport.local import LocalTransport

    class Host(RemoteFetch):
        name, transport = "box", LocalTransport("box")

        async def remote(self) -> None:
            return None

        def job_dir(self, job: Job) -> str:
            return str(tmp_path / "remote" / "jobs" / job.id)

        def log_path(self, job: Job) -> Path:
            return paths.jobs_dir() / job.id / "job.log"

    host = Host()
    host.options = options or {}
    ssh = tmp_path / "dot-ssh"
    ssh.mkdir()
    (ssh / "authorized_keys").write_text("the-persons-key\n")
    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)
    job = _job(Store(), project)
    os.symlink(ssh, project / "runs" / job.short_id)
    remote = tmp_path / "remote" / "jobs" / job.id
    (remote / "out").mkdir(parents=True)
    (remote / "out" / "authorized_keys").write_text("the-agents-key\n")
    (remote / "job.log").write_text("step 1\n")
    (remote / "metrics.jsonl").write_text('{"step": 1}\n')
    (paths.jobs_dir() / job.id).mkdir(parents=True, exist_ok=True)
    return host, ssh, project, job


def test_gpu_fetch_into_a_linked_runs_id_keeps_the_files_at_home(home: Path, tmp_path: Path) -> None:
    from core.engine.fetch import fetch
    from tests.conftest import write_user_config

    write_user_config("targets:\n  local: {kind: local}\n")
    ssh = tmp_path / "dot-ssh"
    ssh.mkdir()
    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)
    store = Store()
    job = _job(store, project)
    store.update(job.id, handle={"attempt_dir": "x"})
    code = paths.jobs_dir() / job.id / "code"
    code.mkdir(parents=True)
    (code / "authorized_keys").write_text("the-agents-key\n")
    os.symlink(ssh, project / "runs" / job.short_id)

    doc = fetch(store, job.short_id, ["authorized_keys"])

    assert list(ssh.iterdir()) == []
    kept = _kept(store, job)
    assert doc["dest"] == str(kept) and doc["files"] == 1
    assert (kept / "authorized_keys").read_text() == "the-agents-key\n"


def test_a_link_swapped_in_after_the_check_still_keeps_the_outputs_at_home(home: Path, tmp_path: Path) -> None:
    """runs/<id>/ was a plain folder when the engine looked, and a link when the copy began:
    the copy is refused before writing, and the engine brings the outputs home again, kept."""
    from core.engine.jobfiles import bring_home
    from core.packaging.safe_extract import safe_copy_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    store = Store()
    job = _job(store, project)
    runs = project / "runs" / job.short_id
    _local_job_wrote(job, {"model.pkl": "weights"})

    class Swapping:
        calls: list[Path] = []

        async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
            self.calls.append(dest)
            if dest == runs:  # the agent's move, between the check and the copy
                shutil.rmtree(runs)
                os.symlink(outside, runs)
            return safe_copy_tree(paths.jobs_dir() / job.id / "out", dest)

    provider = Swapping()
    asyncio.run(bring_home(store, job, provider))

    assert list(outside.iterdir()) == []
    kept = _kept(store, job)
    assert provider.calls == [runs, kept] and (kept / "model.pkl").read_text() == "weights"


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(planted())
def test_a_job_end_never_writes_outside_runs_id_and_loses_nothing(tree: list[tuple[str, str]]) -> None:
    """The engine's whole end of a local job (outputs, log, metrics, settled checkpoint,
    job.json) over any planted tree: nothing outside the project changes, nothing in it but
    runs/<id>/ (a real folder) and runs/.gitignore, and every output is either in runs/<id>/
    or kept at home in the job's folder, as its status says."""
    from core.engine.jobfiles import settle_checkpoint
    from core.packaging import checkpoints
    from core.packaging.checkpoints.home import manifest_path, write_json

    base = Path(tempfile.mkdtemp(prefix="runs-writer-engine-"))
    saved = os.environ.get("GPU_ROUTER_HOME")
    os.environ["GPU_ROUTER_HOME"] = str(base / "gpu-home")
    try:
        outside = base / "outside"
        (outside / "folder").mkdir(parents=True)
        (outside / "folder" / "victim.txt").write_text("the person's file")
        project = base / "project"
        project.mkdir()
        store = Store()
        job = _job(store, project)
        _plant(project, outside, [(rel.replace("runs/j", f"runs/{job.short_id}").replace(
            ".j.", f".{job.short_id}."), kind) for rel, kind in tree])
        _local_job_wrote(job, {"model.pkl": "weights", "sub/x.txt": "X"})
        ckpt = checkpoints.home_dir(job.id)
        ckpt.mkdir(parents=True)
        (ckpt / "model.pt").write_bytes(b"w")
        write_json(manifest_path(job.id), {
            "generation": 1, "bytes": 1, "at": 0, "files": {"model.pt": {
                "size": 1, "mtime_ns": 0, "sha256": hashlib.sha256(b"w").hexdigest()}}})
        before_out, before = _snapshot(outside), _snapshot(project)

        from core.engine.jobfiles import bring_home
        from core.engine.jobreport import write_job_json
        from core.providers.local import LocalProvider

        asyncio.run(bring_home(store, job, LocalProvider()))  # in the supervisor's order
        note = settle_checkpoint(store, store.get(job.id))
        write_job_json(store, store.get(job.id))

        assert _snapshot(outside) == before_out, tree
        after = _snapshot(project)
        rid = f"runs/{job.short_id}"
        runs_real = (project / "runs").is_dir() and not (project / "runs").is_symlink()
        job_real = runs_real and (project / rid).is_dir() and not (project / rid).is_symlink()
        for rel in set(before) | set(after):
            if before.get(rel) != after.get(rel):
                assert (job_real and (rel == rid or rel.startswith(rid + "/"))) or (
                    runs_real and rel == "runs/.gitignore" and rel not in before) or (
                    rel in ("runs", rid) and rel not in before), (rel, tree)
        kept = store.get(job.id).handle.get("outputs_kept")
        where = Path(kept["dir"]) if kept else project / rid
        assert not kept or [e for e in store.events(job.id) if "kept at home" in e.reason]
        assert (where / "model.pkl").read_text() == "weights" and (where / "sub" / "x.txt").read_text() == "X"
        assert (where / "job.log").read_text() == "step 1\n"
        assert json.loads((where / "job.json").read_text())["job"]["id"] == job.id
        if note is None:  # else "not kept: ... already holds the job's own files" (a name taken)
            assert (where / "checkpoint" / "model.pt").read_bytes() == b"w"
        else:
            assert "already holds" in note and os.path.lexists(where / "checkpoint"), note
    finally:
        if saved is None:
            os.environ.pop("GPU_ROUTER_HOME", None)
        else:
            os.environ["GPU_ROUTER_HOME"] = saved
        shutil.rmtree(base, ignore_errors=True)
