"""The transport layer, fast: the local shell, and SSH against an in-process asyncssh server.

The in-process server (as in ../shared/recipes/ssh/asyncssh_inproc.py) runs each command as a
real /bin/sh subprocess and serves SFTP from the real file system: no root, an ephemeral port,
milliseconds to start. It is not OpenSSH; tests/providers/test_ssh.py keeps the real-sshd tests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncssh
import pytest

from core.transport import base, local, ssh
from tests.stubs import eventually

# asyncssh's in-process SFTP server leaves an un-awaited Queue.join when a connection closes
pytestmark = pytest.mark.filterwarnings("ignore:coroutine 'Queue.join' was never awaited:RuntimeWarning")

NASTY = ["plain", "with space", "it's", '"double"', "$(touch /tmp/x)", "`id`", "a;b", "a\nb",
         "--flag=$HOME", "*", "\\", "", "~root", "é ü ✓"]


class _Server(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True


async def _handle(process: asyncssh.SSHServerProcess) -> None:
    """Run the command in a real shell; all of its output is sent before the exit status."""
    data = await process.stdin.read()
    proc = await asyncio.create_subprocess_shell(
        process.command or "sh", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True)
    out, err = await proc.communicate(data)
    process.stdout.write(out)
    process.stderr.write(err)
    process.exit(proc.returncode)


@pytest.fixture
async def server(tmp_path: Path):
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    user_key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = tmp_path / "id_ed25519"
    user_key.write_private_key(str(key_file))
    srv = await asyncssh.create_server(
        _Server, "127.0.0.1", 0, server_host_keys=[host_key],
        authorized_client_keys=asyncssh.import_authorized_keys(user_key.export_public_key().decode()),
        process_factory=_handle, sftp_factory=True, encoding=None)
    port = srv.sockets[0].getsockname()[1]
    known = tmp_path / "known_hosts"
    ep = ssh.Endpoint("127.0.0.1", port, user="tester", key=str(key_file), known_hosts=str(known))
    known.write_text(ssh.known_hosts_line(ep, host_key) + "\n")
    yield ep, host_key, srv
    await ssh.close_all()
    srv.close()
    await srv.wait_closed()


async def test_ssh_runs_scripts_with_every_value_quoted(server, tmp_path: Path) -> None:
    ep, _, _ = server
    t = ssh.SSHTransport(ep, name="box")
    script = "printf '%s\\0' " + " ".join(base.quote(v) for v in NASTY)
    r = await t.run(script, check="printing")
    assert r.stdout.decode().split("\0")[:-1] == NASTY
    r = await t.run("cat; exit 7", input=b"from stdin")
    assert (r.code, r.stdout) == (7, b"from stdin")
    with pytest.raises(base.CommandFailed, match="the step.*status 3.*oops"):
        await t.run("echo oops >&2; exit 3", check="the step")
    assert ssh._POOL[ep].connects == 1  # one connection for all of it


async def test_ssh_files_and_offsets(server, tmp_path: Path) -> None:
    ep, _, _ = server
    t = ssh.SSHTransport(ep, name="box")
    remote = tmp_path / "remote.txt"
    assert await t.put_bytes(b"line1\nline2\n", str(remote)) == 12
    assert remote.read_bytes() == b"line1\nline2\n"
    assert await t.read_from(str(remote), 6, 100) == (b"line2\n", 12)
    assert await t.read_from(str(remote), 12, 100) == (b"", 12)
    assert await t.read_from(str(tmp_path / "nope"), 0, 100) == (b"", -1)
    local = tmp_path / "local.bin"
    local.write_bytes(b"x" * 5000)
    assert await t.put_file(local, str(tmp_path / "copy.bin")) == 5000
    back = tmp_path / "back.bin"
    assert await t.get_file(str(tmp_path / "copy.bin"), back) == 5000
    with pytest.raises(base.TransportError, match="cap"):
        await t.get_file(str(tmp_path / "copy.bin"), back, max_bytes=100)
    assert t.stats["bytes_sent"] >= 5012 and t.stats["files_sent"] == 2


async def test_a_dropped_connection_is_replaced(server) -> None:
    ep, _, _ = server
    t = ssh.SSHTransport(ep, name="box")
    assert (await t.run("echo one")).out == "one\n"
    ssh._POOL[ep].conn.abort()
    await asyncio.sleep(0.05)
    assert (await t.run("echo two")).out == "two\n"
    assert ssh._POOL[ep].connects == 2


async def test_a_host_away_backs_off_and_says_so(server) -> None:
    ep, _, srv = server
    t = ssh.SSHTransport(ep, name="box")
    srv.close()
    await srv.wait_closed()
    await ssh.close_all()
    with pytest.raises(base.Unreachable, match="refused"):
        await t.run("true")
    with pytest.raises(base.Unreachable, match="next try in"):  # no new connect until the backoff ends
        await t.run("true")


async def test_unknown_changed_and_missing_known_hosts_are_refused(server, tmp_path: Path) -> None:
    ep, host_key, _ = server
    fp = host_key.get_fingerprint("sha256")
    Path(ep.known_hosts).write_text("")
    with pytest.raises(base.HostKeyError) as unknown:
        await ssh.SSHTransport(ep, name="box").run("true")
    assert not unknown.value.changed and unknown.value.fingerprint == fp
    assert "gpu targets trust box" in unknown.value.fix and fp in unknown.value.what
    await ssh.close_all()

    other = asyncssh.generate_private_key("ssh-ed25519")
    Path(ep.known_hosts).write_text(ssh.known_hosts_line(ep, other) + "\n")
    ssh._POOL.clear()
    with pytest.raises(base.HostKeyError) as changed:
        await ssh.SSHTransport(ep, name="box").run("true")
    assert changed.value.changed and "CHANGED" in changed.value.what and "--replace" in changed.value.fix

    Path(ep.known_hosts).unlink()  # no file at all: still checked, still refused
    ssh._POOL.clear()
    with pytest.raises(base.HostKeyError):
        await ssh.SSHTransport(ep, name="box").run("true")

    with pytest.raises(ValueError):
        Path(ep.known_hosts).write_text(ssh.known_hosts_line(ep, other) + "\n")
        ssh.trust_host_key(ep, host_key)  # a different key recorded: needs replace
    ssh.trust_host_key(ep, host_key, replace=True)
    assert Path(ep.known_hosts).read_text().splitlines() == [ssh.known_hosts_line(ep, host_key)]
    ssh._POOL.clear()
    assert (await ssh.SSHTransport(ep, name="box").run("echo ok")).out == "ok\n"


async def test_local_transport_matches(tmp_path: Path) -> None:
    t = local.LocalTransport("here", env={"GREETING": "hi there"})
    r = await t.run("printf '%s\\0' " + " ".join(base.quote(v) for v in NASTY) + "; printf %s \"$GREETING\"")
    assert r.stdout.decode().split("\0") == [*NASTY, "hi there"]
    f = tmp_path / "f.txt"
    await t.put_bytes(b"abcdef", str(f))
    assert await t.read_from(str(f), 2, 3) == (b"cde", 6)
    assert await t.read_from(str(tmp_path / "none"), 0, 3) == (b"", -1)
    with pytest.raises(base.TransportError, match="longer than"):
        await t.run("sleep 5", timeout=0.2)


def test_names_and_paths() -> None:
    assert base.safe_name("my job; rm -rf /") == "my-job--rm--rf--"
    assert base.check_name("gpu-1a2b3c4d-1-train") == "gpu-1a2b3c4d-1-train"
    with pytest.raises(ValueError):
        base.check_name("x'; touch /tmp/p")
    assert base.remote_path_expr("~/.gpu-router") == "\"$HOME\"/.gpu-router"
    assert base.remote_path_expr("~/it's") == "\"$HOME\"/'it'\"'\"'s'"
    assert base.remote_path_expr("/abs/p") == "/abs/p"


# -- stream_to: a command's stdout into a local file as it arrives -------------------------


async def test_local_stream_writes_output_as_it_arrives_and_keeps_stderr(tmp_path: Path) -> None:
    """The first bytes are in the file while the command still runs (it waits for GO, which
    the test creates only once it has seen them): nothing is held back until the end."""
    t = local.LocalTransport("here")
    go, dest = tmp_path / "GO", tmp_path / "got.bin"
    script = (f"printf first; echo 'a note' >&2; while [ ! -e {base.quote(go)} ]; do sleep 0.02; done; "
              "head -c 3000000 /dev/zero; exit 4")
    task = asyncio.ensure_future(t.stream_to(script, dest, max_bytes=10 << 20))
    await eventually(lambda: dest.exists() and dest.read_bytes()[:5] == b"first", "first bytes in the file")
    assert not task.done()
    go.touch()
    result, n = await task
    assert (result.code, result.stdout, result.err) == (4, b"", "a note\n")
    assert n == 3_000_005 and dest.read_bytes() == b"first" + bytes(3_000_000)
    assert t.stats["bytes_received"] == n


async def test_local_stream_over_its_cap_stops_the_command_and_keeps_nothing(tmp_path: Path) -> None:
    t = local.LocalTransport("here")
    pid, dest = tmp_path / "pid", tmp_path / "got.bin"
    with pytest.raises(base.OverCap, match=r"over its 1000000 byte cap \(the target's max_output_bytes\)"):
        # never ends by itself: only the stop ends it
        await t.stream_to(f"echo $$ > {base.quote(pid)}; exec yes", dest, max_bytes=1_000_000,
                          what="the checkpoint")
    assert not dest.exists()
    assert not Path(f"/proc/{pid.read_text().strip()}").exists()  # stopped and reaped
    with pytest.raises(base.TransportError, match="sent nothing for 0.3s"):
        await t.stream_to("sleep 30", dest, max_bytes=100, idle_s=0.3)
    assert not dest.exists()


async def test_ssh_stream_copies_the_output_and_stops_at_its_cap(server, tmp_path: Path) -> None:
    ep, _, _ = server
    t = ssh.SSHTransport(ep, name="box")
    dest = tmp_path / "got.bin"
    result, n = await t.stream_to("head -c 5000000 /dev/urandom | tee " + base.quote(tmp_path / "sent.bin")
                                  + "; echo done >&2", dest, max_bytes=6_000_000)
    assert (result.code, result.err, n) == (0, "done\n", 5_000_000)
    assert dest.read_bytes() == (tmp_path / "sent.bin").read_bytes()
    with pytest.raises(base.OverCap, match="the checkpoint from .* stopped at .* over its 1000000 byte cap"):
        await t.stream_to("head -c 5000000 /dev/zero", dest, max_bytes=1_000_000, what="the checkpoint")
    assert not dest.exists()
    r, _ = await t.stream_to("exit 3", dest, max_bytes=10)
    assert r.code == 3 and dest.read_bytes() == b""
    assert (await t.run("echo still")).out == "still\n"  # the stopped copy left the link usable


async def test_a_local_stream_stopped_over_its_cap_never_hangs_on_its_full_pipe(tmp_path: Path) -> None:
    """Python 3.11's Process.wait() returns only once every pipe has closed: a copy stopped
    mid-stream leaves its stdout paused full, and waiting for the killed command hung (about
    one stop in four). Each stop here must come back; the bound only turns a hang into a failure."""
    t = local.LocalTransport("here")
    for i in range(12):
        with pytest.raises(base.OverCap):
            await asyncio.wait_for(t.stream_to("exec yes", tmp_path / f"got-{i}.bin", max_bytes=3_000_000), 60)
        assert not (tmp_path / f"got-{i}.bin").exists()
