"""A PEP 503 "simple" package index on loopback, serving tiny packages built in a folder, so
tests that resolve dependencies never depend on a public index.

    index = PackageIndex(tmp / "index")
    index.add_wheel("tinypure", "1.0", {"tinypure/__init__.py": "X = 1\\n"}, requires=["tinysdist"])
    index.add_sdist("tinysdist", "1.0", {"tinysdist/__init__.py": "Y = 2\\n"})
    index.add_wheel("nativeonly", "1.0", {...}, tag="cp312-cp312-win_amd64")
    ... PIP_INDEX_URL=index.url ...

Wheels are written by hand (a zip with METADATA, WHEEL and RECORD: what pip reads); a source
distribution carries its own tiny PEP 517 backend, so building it needs no index either.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
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


class PackageIndex:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
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
                return super().send_head()

            def log_message(self, *args) -> None:  # noqa: ANN002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

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
