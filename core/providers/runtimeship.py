"""The job-side runtime (core/runtime) as another machine receives it: one small archive with a
hash of its content (uploaded once per hash: the remote targets' cache, Kaggle's dataset), or
one of its stdlib scripts sent as its source to run as `python -c`
(`RemoteProvider._run_runtime`), the sibling modules it imports registered first, so that
script needs no upload.
"""

from __future__ import annotations

import hashlib
import io
import tarfile

from core.runtime import RUNTIME_DIR as runtime_dir_path
from core.runtime import files as runtime_files


def runtime_archive() -> tuple[str, bytes]:
    """The runtime (launcher, text filter, `gpu` module, the tracking modules and the job's
    sitecustomize: `core.runtime.files()`) as one small tar.gz, and a hash of it."""
    files = runtime_files()
    h = hashlib.sha256()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, rel in files:
            data = path.read_bytes()
            h.update(rel.encode() + b"\0" + data + b"\0")
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return h.hexdigest()[:24], buf.getvalue()


# the runtime's sibling modules a script sent as source imports (`import nofollow`, `from objstore import ...`)
RUNTIME_NEEDS = {"workdir.py": ("nofollow",), "ckptscan.py": ("nofollow",), "codetree.py": ("objstore",)}


def runtime_source(module: str) -> str:
    """The source of a runtime script to run as `python -c`, with the sibling modules it
    imports registered first (each executed as its own module), so one choke point
    (nofollow.py) serves the host as it serves this machine, with no upload."""
    source = (runtime_dir_path / module).read_text()
    needs = RUNTIME_NEEDS.get(module, ())
    if not needs:
        return source
    lines = ["import sys as _s, types as _t"]
    for name in needs:
        text = (runtime_dir_path / f"{name}.py").read_text()
        lines += [f"_m = _t.ModuleType({name!r}); _s.modules[{name!r}] = _m",
                  f"exec(compile({text!r}, {name + '.py'!r}, 'exec'), _m.__dict__)"]
    lines.append(f"exec(compile({source!r}, {module!r}, 'exec'), {{'__name__': '__main__'}})")
    return "\n".join(lines) + "\n"
