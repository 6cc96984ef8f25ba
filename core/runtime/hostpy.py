"""What a host's Python is, for dependencies resolved on another machine: run on an ssh, slurm
or pbs host (sent as source to the Python the job uses, `RemoteProvider._run_runtime`), it
prints one JSON line with

- the tags pip needs to pick wheels for it: `python_version` ("3.12"), `implementation` ("cp"),
  `abi` ("cp312", "cp313t" when free-threaded), `platforms` (manylinux_<glibc>_<arch> from
  `os.confstr`, then the plain platform from `sysconfig.get_platform`);
- `packages`: every distribution this interpreter already has (name -> version, through
  `importlib.metadata`), so a wheelhouse leaves out what the job's venv
  (`--system-site-packages`) sees already;
- with `--reach`: whether the package index pip would use here answers a TCP connection within
  `--timeout` seconds (PIP_INDEX_URL of this environment, else pypi.org:443; through the
  HTTPS/HTTP proxy when one is set and the index is not in NO_PROXY).

Standard library only: the host may lack `packaging`, pip, or a network.

    python hostpy.py [--reach] [--timeout S]
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import sysconfig
import threading
from urllib.parse import urlsplit

DEFAULT_INDEX = "https://pypi.org/simple"


def tags() -> dict:
    """Python version, implementation, abi and platform tags of this interpreter."""
    impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name[:2])
    major, minor = sys.version_info[:2]
    abi = f"{impl}{major}{minor}"
    if impl == "cp" and sysconfig.get_config_var("Py_GIL_DISABLED"):
        abi += "t"
    if impl == "pp":  # PyPy names its abi by its own version: pypy39_pp73
        soabi = sysconfig.get_config_var("SOABI") or ""
        abi = soabi.replace("-", "_").rsplit("_", 1)[0] if soabi else abi
    plain = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    platforms = []
    glibc = ""
    try:
        glibc = (os.confstr("CS_GNU_LIBC_VERSION") or "").split()[-1]
    except (AttributeError, ValueError, OSError, IndexError):
        glibc = ""
    if glibc and plain.startswith("linux_"):
        arch = plain[len("linux_"):]
        if arch == "x86_64" and sys.maxsize <= 2**32:
            arch = "i686"  # a 32-bit Python on a 64-bit kernel
        g_major, _, g_minor = glibc.partition(".")
        if g_major.isdigit() and g_minor.split(".")[0].isdigit():
            platforms.append(f"manylinux_{g_major}_{g_minor.split('.')[0]}_{arch}")
    platforms.append(plain)
    return {"python_version": f"{major}.{minor}", "implementation": impl, "abi": abi,
            "platforms": platforms, "glibc": glibc, "machine": platform.machine(),
            "python": sys.version.split()[0], "executable": sys.executable}


def packages() -> dict:
    """name -> version of every distribution this interpreter can import."""
    import importlib.metadata as md

    out = {}
    for dist in md.distributions():
        try:
            name = dist.metadata.get("Name")
            version = dist.version
        except Exception:  # noqa: BLE001 - a broken .dist-info is one package less, not a failure
            continue
        if name and version and name not in out:  # the first on sys.path wins, as for import
            out[name] = version
    return out


def _proxied(scheme: str, host: str) -> str:
    """The proxy URL pip would go through for this index, or ""."""
    for skip in (os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or "").split(","):
        skip = skip.strip().lstrip(".")
        if skip == "*" or (skip and (host == skip or host.endswith("." + skip))):
            return ""
    names = ("HTTPS_PROXY", "https_proxy") if scheme == "https" else ("HTTP_PROXY", "http_proxy")
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


def reach(timeout: float) -> dict:
    """Whether the index pip would use answers within `timeout` seconds (name lookup included)."""
    url = os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "file" or not parts.hostname:
        return {"index": parts.path or url, "ok": os.path.isdir(parts.path or url), "via": "file"}
    host, port = parts.hostname, parts.port or (443 if scheme == "https" else 80)
    shown = f"{host}:{port}"  # never the URL itself: it may hold a password
    via = _proxied(scheme, host)
    if via:
        p = urlsplit(via if "://" in via else f"http://{via}")
        host, port = p.hostname or host, p.port or 8080
    box: dict = {}

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                box["ok"] = True
        except OSError as exc:
            box["error"] = str(exc) or type(exc).__name__

    t = threading.Thread(target=connect, daemon=True)  # a hung name lookup is bounded too
    t.start()
    t.join(timeout + 0.5)
    error = box.get("error") or ("" if box.get("ok") else f"no answer in {timeout:g}s")
    return {"index": shown, "ok": bool(box.get("ok")), "via": f"proxy {host}:{port}" if via else "direct",
            "error": error}


def main(argv: list[str]) -> int:
    timeout = 5.0
    if "--timeout" in argv:
        timeout = float(argv[argv.index("--timeout") + 1])
    doc = {**tags(), "packages": packages()}
    if "--reach" in argv:
        doc["reach"] = reach(timeout)
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()
    os._exit(0)  # a connect thread still waiting on a name lookup must not hold the answer


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
