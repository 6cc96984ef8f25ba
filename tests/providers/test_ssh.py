"""The ssh target against a real OpenSSH server on 127.0.0.1, through the installed `gpu`.

The server is the `sshd` fixture (tests/services.Sshd): its own host key, our user key, a
known_hosts that trusts it (or not, where a test says so). The "remote" host is this machine,
so the target's `root` is a folder of the test; its Python is the one running the tests (numpy
for the example is already there). Nothing here mocks SSH.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import (copy_example, gpu_json, lock_holder, make_git_project, run_gpu, wait_process_gone,
                            wait_state)

pytestmark = pytest.mark.slow

PYTHON = getattr(__import__("sys"), "_base_executable", None) or __import__("sys").executable


def add_box(sshd, tmp_path: Path, name: str = "box", *extra: str, max_jobs: int = 2) -> dict:
    """`gpu targets add ssh` as a user types it; returns its --json answer."""
    o = sshd.target_options(tmp_path / "remote", PYTHON)
    return gpu_json("targets", "add", "ssh", name, "--host", o["host"], "--port", str(o["port"]),
                    "--user", o["user"], "--key", o["key"], "--known-hosts", o["known_hosts"],
                    "--root", o["root"], "--python", o["python"], "--max-jobs", str(max_jobs), *extra)


def job_doc(short: str) -> dict:
    return gpu_json("status", short, "--verbose")


def test_example_runs_on_the_ssh_target_and_comes_home(sshd, home: Path, tmp_path: Path) -> None:
    added = add_box(sshd, tmp_path)
    assert added["probe"]["available"] is True, added
    assert added["probe"]["details"]["host"] == f"root@127.0.0.1:{sshd.port}"
    assert "load" in added["probe"]["details"]
    human = run_gpu("targets")
    assert re.search(r"box\s+ssh\s+.*available", human.stdout), human.stdout

    project = copy_example(tmp_path / "quickstart")
    sub = gpu_json("submit", "--provider", "box", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    assert sub["job"]["provider"] == "box"
    done = wait_state(short, {"done", "failed"}, timeout=180)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    out = Path(sub["job"]["outputs_dir"])
    result = json.loads((out / "result.json").read_text())
    assert result["steps"] == 60 and abs(result["w"] - 3) < 1.0
    assert (out / "job.log").read_text().count("done: w=") == 1
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 60
    assert gpu_json("metrics", short)["metrics"]["loss"]["points"] == 60
    log = run_gpu("logs", short).stdout  # the local mirror of the remote log
    assert "done: w=" in log and "attempt 1: exited with status 0" in log
    doc = job_doc(short)
    assert [e["to"] for e in doc["events"] if e["to"]] == ["queued", "routing", "provisioning", "running", "done"]
    remote_job = tmp_path / "remote" / "jobs" / doc["id"]
    assert (remote_job / "attempts" / "1" / "exit.json").exists()
    first_bytes = doc["handle"]["uploaded_bytes"]

    # the same project again: the bundle, runtime and venv are cached on the host
    again = gpu_json("submit", "--provider", "box", "--hours", "0.1", "--env", "RUN=2", "--wait-s", "10",
                     cwd=project)
    assert wait_state(again["job"]["short_id"], {"done", "failed"}, timeout=120)["state"] == "done"
    second = job_doc(again["job"]["short_id"])["handle"]["uploaded_bytes"]
    assert second < 4096 < first_bytes, (first_bytes, second)
    assert len(list((tmp_path / "remote" / "bundles").glob("*.ready"))) == 1
    assert "reusing environment" in run_gpu("logs", again["job"]["short_id"]).stdout


def test_a_dropped_connection_and_a_host_away_do_not_fail_the_job(sshd, home: Path, tmp_path: Path) -> None:
    add_box(sshd, tmp_path)
    project = copy_example(tmp_path / "p")
    sub = gpu_json("submit", "--provider", "box", "--hours", "0.1", "--wait-s", "10",
                   "--", "--steps", "240", "--sleep", "0.05", cwd=project)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=120)
    time.sleep(1)
    killed = sshd.kill_connections()  # the sshd process serving the supervisor's connection
    assert killed, "the supervisor held no SSH connection"
    time.sleep(1.5)
    assert job_doc(short)["state"] == "running"
    sshd.stop()  # now the host is away altogether
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        doc = job_doc(short)
        if "unreachable" in doc["reason"]:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the job never said its host was unreachable: {doc['reason']}")
    assert doc["state"] == "running" and "retrying" in doc["reason"]
    time.sleep(2)
    sshd.start()
    done = wait_state(short, {"done", "failed"}, timeout=120)
    assert done["state"] == "done", done
    reasons = [e["reason"] for e in job_doc(short)["events"]]
    assert not any("lost" in r for r in reasons)
    out = Path(sub["job"]["outputs_dir"])
    assert json.loads((out / "result.json").read_text())["steps"] == 240
    assert (out / "job.log").read_text().count("step  230") == 1  # mirrored once, no gaps or repeats


def test_unknown_and_changed_host_keys_are_refused(sshd, home: Path, tmp_path: Path) -> None:
    sshd.known_hosts.write_text("")  # nothing trusted yet
    added = add_box(sshd, tmp_path)
    probe = added["probe"]
    assert probe["available"] is False
    fp = probe["details"]["host_key"]["fingerprint"]
    assert fp.startswith("SHA256:")
    assert "not known" in probe["why_unavailable"] and "gpu targets trust box" in probe["why_unavailable"]
    assert fp in probe["why_unavailable"]
    assert not (tmp_path / "remote").exists()  # nothing was sent: no login, no command

    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n"})
    refused = run_gpu("submit", "a.py", "--provider", "box", "--hours", "0.1", cwd=project)
    assert refused.returncode == 2 and "not known" in refused.stderr and "gpu targets trust box" in refused.stderr

    # trusting needs a person or the checked fingerprint
    blind = run_gpu("targets", "trust", "box")
    assert blind.returncode == 2 and f"--fingerprint {fp}" in blind.stderr
    wrong = run_gpu("targets", "trust", "box", "--fingerprint", "SHA256:" + "A" * 43)
    assert wrong.returncode == 2 and "nothing was trusted" in wrong.stderr
    assert sshd.known_hosts.read_text() == ""
    trusted = gpu_json("targets", "trust", "box", "--fingerprint", fp)
    assert trusted["trusted"] is True and trusted["fingerprint"] == fp
    assert sshd.host_key_line().split()[2] in sshd.known_hosts.read_text()
    listed = {t["name"]: t for t in gpu_json("targets")["targets"]}
    assert listed["box"]["available"] is True

    # the host now presents another key: refused, and called a change, not an unknown key
    sshd.known_hosts.write_text(sshd.host_key_line("other_host_key") + "\n")
    probe = gpu_json("targets", "add", "ssh", "box", "--host", "127.0.0.1", "--port", str(sshd.port),
                     "--user", "root", "--key", str(sshd.key), "--known-hosts", str(sshd.known_hosts),
                     "--root", str(tmp_path / "remote"), "--python", PYTHON)["probe"]
    assert probe["available"] is False and "CHANGED" in probe["why_unavailable"]
    assert probe["details"]["host_key"]["changed"] is True
    assert "--replace" in probe["why_unavailable"]
    refused = run_gpu("submit", "a.py", "--provider", "box", "--hours", "0.1", cwd=project)
    assert refused.returncode == 2 and "CHANGED" in refused.stderr
    no_replace = run_gpu("targets", "trust", "box", "--fingerprint", fp)
    assert no_replace.returncode == 2 and "CHANGED" in no_replace.stderr
    replaced = gpu_json("targets", "trust", "box", "--fingerprint", fp, "--replace")
    assert replaced["trusted"] is True
    lines = sshd.known_hosts.read_text().splitlines()
    assert lines == [sshd.host_key_line()]


def test_trust_at_a_terminal_shows_the_fingerprint_and_needs_yes(sshd, home: Path, tmp_path: Path) -> None:
    from tests.conftest import gpu_exe, run_in_terminal

    sshd.known_hosts.write_text("")
    add_box(sshd, tmp_path)
    status, out = run_in_terminal([gpu_exe(), "targets", "trust", "box"], "no")
    assert status == 2 and "SHA256:" in out and "you did not type yes" in out
    assert sshd.known_hosts.read_text() == ""
    status, out = run_in_terminal([gpu_exe(), "targets", "trust", "box"], "yes")
    assert status == 0 and "trusted 127.0.0.1" in out.replace("root@", "")
    assert sshd.known_hosts.read_text().splitlines() == [sshd.host_key_line()]


def test_quotes_in_names_and_args_run_nothing(sshd, home: Path, tmp_path: Path) -> None:
    marker = Path(f"/tmp/pwned-{uuid.uuid4().hex[:10]}")
    evil = f"'; touch {marker}; echo '"
    add_box(sshd, tmp_path)
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "rows.csv").write_text("a,b\n1,2\n")
    project = make_git_project(tmp_path / "p", {
        "show.py": "import json, os, sys\nimport gpu\nprint('ARGV', json.dumps(sys.argv[1:]))\n"
                   "print('ENV', json.dumps(os.environ.get('EVIL')))\n"
                   "print('DATA', (gpu.data_dir() / 'ds' / 'rows.csv').read_text().splitlines()[1])\n",
        f"odd{evil.replace('/', '_')}.txt": "a file with a hostile name ships as data, not code\n",
    })
    bad_name = run_gpu("submit", "show.py", "--provider", "box", "--hours", "0.1", "--name", f"x{evil}",
                       cwd=project)
    assert bad_name.returncode == 2 and "name" in bad_name.stderr
    args = [evil, f"$(touch {marker})", f"`touch {marker}`", f"a\nb; touch {marker}", "--x=$HOME"]
    sub = gpu_json("submit", "show.py", "--provider", "box", "--hours", "0.1", "--env", f"EVIL={evil}",
                   "--data", f"ds={data}", "--wait-s", "10", "--", *args, cwd=project)
    done = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert done["state"] == "done", run_gpu("logs", sub["job"]["short_id"]).stdout
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    argv_line = next(ln for ln in log.splitlines() if ln.startswith("ARGV "))
    assert json.loads(argv_line[5:]) == args  # every argument arrived intact, none ran
    assert f'ENV {json.dumps(evil)}' in log
    assert "DATA 1,2" in log  # the data set was uploaded into the host's cache and linked
    assert len(list((tmp_path / "remote" / "data").glob("*.ready"))) == 1
    assert not marker.exists()


def test_cancel_stops_the_remote_process_group(sshd, home: Path, tmp_path: Path) -> None:
    add_box(sshd, tmp_path)
    project = make_git_project(tmp_path / "p", {
        "spawn.py": (
            "import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "open('child.pid', 'w').write(str(child.pid))\n"
            "print('child', child.pid, flush=True)\n"
            "time.sleep(600)\n"),
    })
    sub = gpu_json("submit", "spawn.py", "--provider", "box", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=60)
    pidfile = tmp_path / "remote" / "jobs" / sub["job"]["id"] / "code" / "child.pid"
    deadline = time.monotonic() + 30
    while not pidfile.exists():
        assert time.monotonic() < deadline, "the job never wrote its child's pid"
        time.sleep(0.1)
    # the job runs in the host's sandbox (its own pid namespace: the pid it wrote is not the
    # host's), so its processes are found on the host as cancel finds them: by their marker
    from core.runtime.jobprocs import marked_pids

    procs = marked_pids(f"{sub['job']['id']}:1")
    children = [p for p in procs if "time.sleep(600)" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
    assert children, procs  # the job's child, among the launcher, bubblewrap and the job
    res = gpu_json("cancel", short, timeout=60)
    assert res["job"]["state"] == "cancelled"
    for pid in procs:
        wait_process_gone(pid, 10, "a process of the job on the host survived cancel")


def test_secrets_reach_the_job_but_never_the_hosts_disk_or_command_lines(
        sshd, keychain, home: Path, tmp_path: Path) -> None:
    value = "s3cr3t-" + uuid.uuid4().hex
    assert run_gpu("secrets", "set", "API_TOKEN", input=value).returncode == 0
    add_box(sshd, tmp_path)
    project = make_git_project(tmp_path / "p", {
        "leak.py": "import os, time\nv = os.environ['API_TOKEN']\nprint('token is', v, flush=True)\n"
                   "print('length', len(v), flush=True)\ntime.sleep(3)\n",
    })
    sub = gpu_json("submit", "leak.py", "--provider", "box", "--hours", "0.1", "--secret", "API_TOKEN",
                   "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    assert sub["job"]["state"] == "awaiting_approval"  # secrets need a person's yes
    from core.engine.approvals import approve
    from core.jobs.store import Store

    approve(Store(), sub["job"]["id"], digest=sub["job"]["digest"], actor="test")
    wait_state(short, {"running", "done", "failed"}, timeout=120)
    seen_in_cmdline = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if value.encode() in (proc / "cmdline").read_bytes():
                    seen_in_cmdline.append(proc.name)
            except OSError:
                pass
    done = wait_state(short, {"done", "failed"}, timeout=120)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    assert seen_in_cmdline == []
    log = run_gpu("logs", short).stdout
    assert "token is [secret]" in log and f"length {len(value)}" in log and value not in log
    for path in (tmp_path / "remote").rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert value.encode() not in path.read_bytes(), path


def test_the_supervisor_killed_mid_job_readopts_the_remote_job(sshd, home: Path, tmp_path: Path) -> None:
    import signal as sig

    add_box(sshd, tmp_path)
    project = copy_example(tmp_path / "p")
    sub = gpu_json("submit", "--provider", "box", "--hours", "0.1", "--wait-s", "10",
                   "--", "--steps", "120", "--sleep", "0.05", cwd=project)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=120)
    pid = lock_holder(home / "supervisor.lock")
    assert pid, "no supervisor held its lock"
    os.kill(pid, sig.SIGKILL)
    time.sleep(0.5)
    assert gpu_json("daemon", "--detach")["running"]
    done = wait_state(short, {"done", "failed"}, timeout=120)
    assert done["state"] == "done" and done["attempt"] == 1
    assert (Path(sub["job"]["outputs_dir"]) / "result.json").exists()


def test_credentials_never_reach_the_host_and_odd_names_arrive_exact(sshd, home: Path,
                                                                      tmp_path: Path) -> None:
    """Over a real SSH upload: the bundle and the data set arrive without their credential
    files (by name, by content, by hard link), and a non-UTF-8 file name keeps its bytes."""
    add_box(sshd, tmp_path)
    user_home = tmp_path / "userhome"
    (user_home / ".ssh").mkdir(parents=True)
    (user_home / ".ssh" / "id_rsa").write_text("HOME-KEY-MARKER\n")
    data = tmp_path / os.fsdecode(b"dataset\xe9")
    data.mkdir()
    (data / "rows.csv").write_text("a,b\n1,2\n")
    (data / os.fsdecode(b"m\xffore.csv")).write_text("3,4\n")
    (data / ".env").write_text("DATA-ENV-MARKER\n")
    (data / "notes.txt").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
                                    "-----END OPENSSH PRIVATE KEY-----\n")
    os.link(user_home / ".ssh" / "id_rsa", data / "copy.csv")
    project = make_git_project(tmp_path / "p", {
        "show.py": "import os, gpu\nprint('DATA', sorted(os.listdir(gpu.data_dir() / 'ds')))\n"
                   "print('CODE', sorted(os.listdir(os.fsencode('.'))))\n"})
    os.link(user_home / ".ssh" / "id_rsa", project / "backup.txt")
    (project / ".env").write_text("CODE-ENV-MARKER\n")
    with open(os.fsencode(project) + b"/caf\xe9.txt", "wb") as f:
        f.write(b"odd name\n")
    env = {"HOME": str(user_home)}
    sub = gpu_json("submit", "show.py", "--provider", "box", "--hours", "0.1", "--data", f"ds={data}",
                   "--wait-s", "10", cwd=project, env=env)
    done = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert done["state"] == "done", log
    uploaded = [d for d in (tmp_path / "remote" / "data").iterdir() if d.is_dir()]
    assert len(uploaded) == 1 and sorted(os.listdir(os.fsencode(uploaded[0]))) == [b"m\xffore.csv", b"rows.csv"]
    code = tmp_path / "remote" / "jobs" / sub["job"]["id"] / "code"
    assert sorted(os.listdir(os.fsencode(code))) == [b"caf\xe9.txt", b"show.py"]
    remote = os.fsencode(tmp_path / "remote")
    for dirpath, _, files in os.walk(remote):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                blob = f.read()
            if name.endswith(b".gz"):
                blob = __import__("gzip").decompress(blob)  # bundles and data arrive packed
            for secret in (b"HOME-KEY-MARKER", b"DATA-ENV-MARKER", b"CODE-ENV-MARKER", b"b3BlbnNzaC1rZXkt"):
                assert secret not in blob, (os.path.join(dirpath, name), secret)


def test_every_call_to_a_frozen_host_ends_within_its_silence_and_says_since_when(
        sshd, tmp_path: Path) -> None:
    """sshd and its connection SIGSTOPped (nothing closes, nothing answers): a command, an
    SFTP read, write, upload and download, a streamed copy each end Unreachable within the link's silence
    (the keepalives the grace sets) plus the connect timeout, not the ~75 s the fixed
    keepalive took; the transport says since when the host is silent, and forgets it once
    the host answers again."""
    import asyncio

    from core.transport.base import Unreachable
    from core.transport.ssh import Endpoint, SSHTransport, close_all, silence_for

    o = sshd.target_options(tmp_path / "remote", PYTHON)
    grace = 8.0
    ep = Endpoint(o["host"], o["port"], user=o["user"], key=o["key"], known_hosts=o["known_hosts"],
                  connect_timeout=2.0, silent_s=silence_for(grace))
    assert ep.silent_s == 4.0 and ep.silent_s < grace
    target = tmp_path / "remote"
    target.mkdir()
    (target / "f").write_bytes(b"x" * 1000)
    local = tmp_path / "up.bin"
    local.write_bytes(b"y" * 1000)

    async def calls() -> list[tuple[str, float, float | None, float]]:
        t = SSHTransport(ep, name="box")
        ended = []
        for what, call in (
                ("run", lambda: t.run("echo hi", timeout=120)),
                ("read_from", lambda: t.read_from(str(target / "f"), 0, 100)),
                ("put_bytes", lambda: t.put_bytes(b"z", str(target / "g"))),
                ("put_file", lambda: t.put_file(local, str(target / "h"))),
                ("get_file", lambda: t.get_file(str(target / "f"), tmp_path / "down.bin")),
                ("stream_to", lambda: t.stream_to(f"cat {target / 'f'}; sleep 60", tmp_path / "s.bin",
                                                  max_bytes=1 << 20))):
            # a live connection with its SFTP session open, then the host freezes under it
            assert (await t.run("echo hi")).out.strip() == "hi" and t.silent_since() is None
            await t.read_from(str(target / "f"), 0, 10)
            sshd.freeze()
            try:
                started = time.time()
                with pytest.raises(Unreachable):
                    await call()
                ended.append((what, time.time() - started, t.silent_since(), started))
            finally:
                sshd.thaw()
            await t.close()  # forget the backoff: the next round connects at once
        assert (await t.run("echo back")).out.strip() == "back"
        assert t.silent_since() is None
        await close_all()
        return ended

    ended = asyncio.run(calls())
    for what, took, since, started in ended:
        # silence (4 s) + a reconnect's timeout (2 s), generously; never the old 75 s
        assert took < 30, (what, took)
        assert since is not None and since <= started + 1, what  # silent since the call began


def test_a_one_line_change_ships_one_object_and_jobs_cannot_touch_each_others_code(
        sshd, home: Path, tmp_path: Path) -> None:
    """Bundles travel as objects: the second submit, one line changed, sends that file's new
    content and the manifest, nothing else of the project; each job's code folder is its own
    copy, so a job overwriting a shipped file changes neither another job's copy nor the
    host's object store (the next job from the same bundle reads the original bytes). An
    ended job's folder that it left untouched is taken over by the next job (only the changed
    file written); one it wrote into is left as it is, and the next job gets a fresh copy."""
    import hashlib

    add_box(sshd, tmp_path)
    blob = os.urandom(200_000).hex()  # 400 KB of text that gzip halves, no more
    project = make_git_project(tmp_path / "p", {
        "a.py": "import os, pathlib\n"
                "print('DATA', pathlib.Path('data.txt').read_text().strip())\n"
                "if os.environ.get('WRITE') == '1':\n"
                "    pathlib.Path('data.txt').write_text('CORRUPTED\\n')\n",
        "data.txt": "ORIGINAL\n",
        "notes.txt": "line one\nline two\n",
        "blob.txt": blob,
    })
    store = tmp_path / "remote" / "objects"

    def submit(write: str, run: str) -> dict:
        sub = gpu_json("submit", "a.py", "--provider", "box", "--hours", "0.1", "--env", f"WRITE={write}",
                       "--env", f"RUN={run}", "--wait-s", "10", cwd=project)
        short = sub["job"]["short_id"]
        done = wait_state(short, {"done", "failed"}, timeout=120)
        assert done["state"] == "done", run_gpu("logs", short).stdout
        assert "DATA ORIGINAL" in run_gpu("logs", short).stdout
        return job_doc(short)

    def stored() -> set[str]:
        return {p.parent.name + p.name for p in store.glob("??/*")}

    first = submit("0", "1")
    jobs = tmp_path / "remote" / "jobs"
    first_inode = (jobs / first["id"] / "code" / "blob.txt").stat().st_ino
    before = stored()
    assert hashlib.sha256(blob.encode()).hexdigest() in before
    assert first["handle"]["uploaded_bytes"] > 200_000

    changed = "line one\nline two, changed\n"
    (project / "notes.txt").write_text(changed)
    second = submit("1", "2")  # this job overwrites its data.txt
    assert stored() - before == {hashlib.sha256(changed.encode()).hexdigest()}
    manifests = tmp_path / "remote" / "bundles"
    assert len(list(manifests.glob("*.json"))) == 2
    # the manifest (gzip'd), one small object and the attempt's spec: nothing of the blob
    assert second["handle"]["uploaded_bytes"] < 16_000, second["handle"]

    # the first job wrote nothing into its folder: the second took it over, changing one file
    assert not (jobs / first["id"] / "code").exists()
    assert (jobs / second["id"] / "code" / "blob.txt").stat().st_ino == first_inode
    assert (jobs / second["id"] / "code" / "notes.txt").read_text() == changed
    fetched = run_gpu("fetch", first["short_id"], "data.txt")
    assert fetched.returncode != 0 and "took it over" in fetched.stderr, fetched.stderr

    third = submit("0", "3")  # the same bundle as the second: read "ORIGINAL" (asserted above)
    assert len(list(manifests.glob("*.json"))) == 2 and third["handle"]["uploaded_bytes"] < 8_000
    # the second job wrote into its folder: left as it was (for `gpu fetch`), the third built anew
    assert (jobs / second["id"] / "code" / "data.txt").read_text() == "CORRUPTED\n"
    assert (jobs / third["id"] / "code" / "data.txt").read_text() == "ORIGINAL\n"
    assert (jobs / third["id"] / "code" / "blob.txt").stat().st_ino != first_inode
    for p in store.glob("??/*"):  # every object still holds the bytes its name says
        assert hashlib.sha256(p.read_bytes()).hexdigest() == p.parent.name + p.name

    # `gpu gc` over ssh: once their manifests go (unused for days), so do the objects
    then = time.time() - 9 * 86400
    for p in [*manifests.iterdir(), *store.glob("??/*")]:
        os.utime(p, (then, then))
    gc = gpu_json("gc", "--where", "box", "--all")["locations"][0]
    assert gc["error"] is None and gc["freed"] > 200_000
    assert not list(manifests.glob("*.json")) and not list(store.glob("??/*"))
