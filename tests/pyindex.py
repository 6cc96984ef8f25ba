"""A PEP 503 "simple" package index on loopback, serving tiny packages built in a folder, so
tests that resolve dependencies never depend on a public index.

    index = PackageIndex(tmp / "index")
    index.add_wheel("tinypure", "1.0", {"tinypure/__init__.py": "X = 1\\n"}, requires=["tinysdist"])
    index.add_sdist("tinysdist", "1.0", {"tinysdist/__init__.py": "Y = 2\\n"})
    index.add_wheel("nativeonly", "1.0", {...}, tag="cp312-cp312-win_amd64")
    ... PIP_INDEX_URL=index.url ...

Wheels are written by hand (a zip with METADATA, WHEEL and RECORD: what pip reads); a source
distribution carries its own tiny PEP 517 backend, so building it needs no index either.

`PackageIndex(root, json=True)` also answers PEP 691's JSON form (with each file's `size`,
PEP 700) to a client that asks for it, as PyPI does: uv then writes the sizes into a
pylock.toml. `pace` (bytes a second) serves package files slowly, so a test can see an install
while it downloads.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json as jsonlib
import os
import tarfile
import time
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _norm(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def sdist_bytes(base: str, contents: dict[str, str]) -> bytes:
    """An sdist: `contents` (path: text) under `base/` in a tar.gz."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in contents.items():
            data = text.encode()
            member = tarfile.TarInfo(f"{base}/{path}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return buf.getvalue()


def _core_metadata(path: Path) -> dict:
    """PEP 691's `core-metadata` for a file with its METADATA served beside it (PEP 658/714)."""
    meta = path.with_name(path.name + ".metadata")
    if not meta.exists():
        return {}
    return {"core-metadata": {"sha256": hashlib.sha256(meta.read_bytes()).hexdigest()}}


class PackageIndex:
    def __init__(self, root: Path, *, json: bool = False, pace: int | None = None) -> None:
        self.root = Path(root)
        self.json = json
        self.files = self.root / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.projects: dict[str, list[str]] = {}
        self.requests: list[str] = []  # every path asked for, in order: what a test counts
        root_dir = str(self.root)
        asked = self.requests

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):  # noqa: ANN002, ANN003 - http.server's signature
                super().__init__(*a, directory=root_dir, **kw)

            def send_head(self):  # noqa: ANN201 - GET and HEAD both come here
                asked.append(self.path)
                wants_json = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
                page = os.path.join(root_dir, self.path.lstrip("/").split("?")[0], "index.json")
                if wants_json and self.path.endswith("/") and os.path.isfile(page):
                    with open(page, "rb") as f:
                        body = f.read()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    return io.BytesIO(body)
                return super().send_head()

            def copyfile(self, source, outputfile) -> None:  # noqa: ANN001 - http.server's signature
                if pace is None or not self.path.startswith("/files/"):
                    return super().copyfile(source, outputfile)
                while True:  # a slow index: `pace` bytes a second, in tenths
                    chunk = source.read(max(1, pace // 10))
                    if not chunk:
                        return None
                    outputfile.write(chunk)
                    outputfile.flush()
                    time.sleep(0.1)

            def log_message(self, *args) -> None:  # noqa: ANN002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def downloads(self) -> list[str]:
        """The package files fetched so far (not the index pages)."""
        return [p for p in self.requests if p.startswith("/files/")]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _publish(self, name: str, filename: str) -> None:
        self.projects.setdefault(_norm(name), []).append(filename)
        simple = self.root / "simple"
        links = []
        for fname in self.projects[_norm(name)]:
            digest = hashlib.sha256((self.files / fname).read_bytes()).hexdigest()
            links.append(f'<a href="../../files/{fname}#sha256={digest}">{fname}</a><br/>')
        page = simple / _norm(name)
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
        if self.json:  # PEP 691 with PEP 700's sizes
            files = [{"filename": f, "url": f"../../files/{f}", "size": (self.files / f).stat().st_size,
                      "hashes": {"sha256": hashlib.sha256((self.files / f).read_bytes()).hexdigest()},
                      **_core_metadata(self.files / f)}
                     for f in self.projects[_norm(name)]]
            (page / "index.json").write_text(jsonlib.dumps(
                {"meta": {"api-version": "1.1"}, "name": _norm(name), "files": files,
                 "versions": sorted({f[len(_norm(name)):].lstrip("-_").split("-")[0].removesuffix(".tar.gz")
                                     for f in self.projects[_norm(name)]})}))
        (simple / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(
            f'<a href="{p}/">{p}</a><br/>' for p in sorted(self.projects)) + "\n</body></html>\n")

    def add_file(self, name: str, path: Path) -> Path:
        """A package file made elsewhere (a real wheel from pip's cache or a local folder),
        served as it is (bench/deps_install.py: the biggest wheels at hand)."""
        import shutil

        shutil.copyfile(path, self.files / Path(path).name)
        self._publish(name, Path(path).name)
        return self.files / Path(path).name

    def add_wheel(self, name: str, version: str, files: dict[str, str], *, requires: list[str] = (),
                  tag: str = "py3-none-any") -> Path:
        dist = name.replace("-", "_")
        info = f"{dist}-{version}.dist-info"
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
            f"Requires-Dist: {r}\n" for r in requires)
        contents = dict(files)
        contents[f"{info}/METADATA"] = meta
        contents[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: "
                                     f"{'true' if tag.endswith('any') else 'false'}\nTag: {tag}\n")
        record = []
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for path, text in contents.items():
                data = text.encode()
                z.writestr(path, data)
                h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                record.append(f"{path},sha256={h},{len(data)}")
            record.append(f"{info}/RECORD,,")
            z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
        fname = f"{dist}-{version}-{tag}.whl"
        (self.files / fname).write_bytes(buf.getvalue())
        if self.json:  # PEP 658's metadata beside the wheel: a resolver reads it, not the wheel
            (self.files / f"{fname}.metadata").write_text(meta)
        self._publish(name, fname)
        return self.files / fname

    def add_sdist(self, name: str, version: str, files: dict[str, str], *, requires: list[str] = (),
                  compiled: bool = False) -> Path:
        """A source distribution with an in-tree PEP 517 build backend (`backend-path`, no
        build requirements), so pip builds it with nothing from any index; `compiled` makes the
        wheel it builds platform-specific (as a C extension's would be), with no compiler."""
        dist = name.replace("-", "_")
        base = f"{dist}-{version}"
        tag = "cp311-cp311-linux_x86_64" if compiled else "py3-none-any"
        contents = {**files, "pyproject.toml": PYPROJECT, "_backend/tinybackend.py": BACKEND % {
            "name": name, "dist": dist, "version": version, "tag": tag, "requires": list(requires),
            "packages": sorted({p.split("/")[0] for p in files if "/" in p})},
            "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}
        fname = f"{base}.tar.gz"
        (self.files / fname).write_bytes(sdist_bytes(base, contents))
        self._publish(name, fname)
        return self.files / fname


PYPROJECT = """[build-system]
requires = []
build-backend = "tinybackend"
backend-path = ["_backend"]
"""

BACKEND = '''"""A PEP 517 backend that zips the package folders into a wheel (standard library only)."""
import base64, hashlib, os, zipfile

NAME, DIST, VERSION, TAG = %(name)r, %(dist)r, %(version)r, %(tag)r
REQUIRES, PACKAGES = %(requires)r, %(packages)r


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    info = f"{DIST}-{VERSION}.dist-info"
    files = {}
    for pkg in PACKAGES:
        for here, _dirs, names in os.walk(pkg):
            for n in names:
                path = os.path.join(here, n)
                files[path.replace(os.sep, "/")] = open(path, "rb").read()
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n"
                                 + "".join(f"Requires-Dist: {r}\\n" for r in REQUIRES)).encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\\nGenerator: tinybackend\\n"
                              f"Root-Is-Purelib: {str(TAG.endswith('any')).lower()}\\nTag: {TAG}\\n").encode()
    record = []
    fname = f"{DIST}-{VERSION}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, fname), "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
            h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={h},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\\n".join(record) + "\\n")
    return fname
'''
