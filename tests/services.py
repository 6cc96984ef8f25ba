"""Real services the tests start and stop themselves, on loopback, from system packages.

A missing package is a failure that names the install step (the README's test command),
never a skip: CI must not pass by testing less.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

INSTALL = ("sudo apt-get install -y dbus gnome-keyring openssh-server slurmd slurmctld "
           "slurm-client munge (the first part of the README's test command)")


def require(*exes: str) -> dict[str, str]:
    found = {}
    for exe in exes:
        path = shutil.which(exe) or next((p for p in (f"/usr/sbin/{exe}", f"/usr/bin/{exe}")
                                          if os.path.exists(p)), None)
        if path is None:
            pytest.fail(f"{exe} is not installed: {INSTALL}")
        found[exe] = path
    return found


class Keychain:
    """A private D-Bus session with an unlocked gnome-keyring: a real SecretService."""

    def __init__(self, root: Path) -> None:
        exes = require("dbus-daemon", "gnome-keyring-daemon", "dbus-send")
        self.root = root
        home = root / "home"
        runtime = root / "run"
        for d in (home, runtime, home / ".local" / "share"):
            d.mkdir(parents=True, exist_ok=True)
        runtime.chmod(0o700)
        self.env = {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share"),
                    "XDG_RUNTIME_DIR": str(runtime), "XDG_CONFIG_HOME": str(home / ".config")}
        bus = root / "bus"
        self.dbus = subprocess.Popen(
            [exes["dbus-daemon"], "--session", "--nofork", "--nopidfile", "--print-address=1",
             f"--address=unix:path={bus}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env={**os.environ, **self.env})
        address = self.dbus.stdout.readline().strip()
        if not address:
            self.close()
            pytest.fail("dbus-daemon did not start")
        self.env["DBUS_SESSION_BUS_ADDRESS"] = address
        self.keyring = subprocess.Popen(
            [exes["gnome-keyring-daemon"], "--foreground", "--unlock", "--components=secrets"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, **self.env})
        self.keyring.stdin.write(b"test-keyring-password")
        self.keyring.stdin.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            out = subprocess.run(
                [exes["dbus-send"], "--session", "--print-reply", "--dest=org.freedesktop.DBus", "/",
                 "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.secrets"],
                capture_output=True, text=True, env={**os.environ, **self.env})
            if "true" in out.stdout:
                return
            time.sleep(0.1)
        self.close()
        pytest.fail("gnome-keyring-daemon did not take the org.freedesktop.secrets name")

    def close(self) -> None:
        for proc in (getattr(self, "keyring", None), self.dbus):
            if proc and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
