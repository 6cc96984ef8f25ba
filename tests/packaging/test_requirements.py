"""The project's dependencies as pip reads them (core/packaging/requirements.py): the one reader
every target uses. Unit and property tests over the reader, and real pip installs from a loopback
PEP 503 index this test serves, on the local target."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import io
import posixpath
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.errors import UserError
from core.packaging.depfiles import BundleFiles
from core.packaging.requirements import read_dependencies
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state


class DictFiles(BundleFiles):
    """A bundle's view of a dict {path: text}, recording every path the reader asks for."""

    def __init__(self, files: dict[str, str], links: dict[str, str] | None = None) -> None:
        self._data = {k: v.encode() for k, v in files.items()}
        self._digests = {k: hashlib.sha256(v).digest() for k, v in self._data.items()}
        self._links = links or {}
        self.asked: list[str] = []

    def _kind(self, rel: str) -> str | None:
        self.asked.append(rel)
        return "file" if rel in self._data else "link" if rel in self._links else None

    def _link(self, rel: str) -> str:
        return self._links[rel]


def _tar(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _error(files: dict[str, str], workdir: str = "", extras: tuple[str, ...] = ()) -> UserError:
    with pytest.raises(UserError) as exc:
        read_dependencies(DictFiles(files), workdir, extras)
    return exc.value


# -- reading as pip reads -------------------------------------------------------------------

NESTED = {
    "proj/requirements.txt": (
        "# the top file\n"
        "-r reqs/base.txt   # nested, relative to this file\n"
        "--extra-index-url http://127.0.0.1:9/simple \\\n"
        "    --trusted-host 127.0.0.1\n"
        "tinyb ; python_version >= '3' --hash=sha256:" + "a" * 64 + "\n"
        "never ; python_version < '3'\n"),
    "proj/reqs/base.txt": "tinya>=1\n-c pins.txt\n--pre\n",
    "proj/reqs/pins.txt": "tinya==1.0  # a constraint, from the file beside base.txt\n",
}


def test_nested_files_resolve_against_the_file_that_names_them() -> None:
    deps = read_dependencies(DictFiles(NESTED), "proj")
    assert deps is not None
    assert deps.source == "proj/requirements.txt"
    assert deps.files == ["proj/requirements.txt", "proj/reqs/base.txt", "proj/reqs/pins.txt"]
    assert deps.requirements == ["tinya>=1", "tinyb ; python_version >= '3' --hash=sha256:" + "a" * 64,
                                 "never ; python_version < '3'"]  # markers are pip's to judge there
    assert deps.constraints == ["tinya==1.0"]
    assert deps.options == ["--pre", "--extra-index-url http://127.0.0.1:9/simple", "--trusted-host 127.0.0.1"]


def test_the_hash_follows_what_is_installed_not_how_it_is_written(tmp_path: Path) -> None:
    base = read_dependencies(DictFiles(NESTED), "proj")
    respelled = {**NESTED, "proj/reqs/base.txt": "# comments and blanks change nothing\n\ntinya>=1\n-c pins.txt\n--pre"}
    assert read_dependencies(DictFiles(respelled), "proj").hash == base.hash
    # the same files in a real bundle tar: the same answer
    assert read_dependencies(BundleFiles(_tar(tmp_path / "b.tar.gz", NESTED)), "proj").hash == base.hash
    pinned = {**NESTED, "proj/reqs/pins.txt": "tinya==2.0\n"}
    assert read_dependencies(DictFiles(pinned), "proj").hash != base.hash
    indexed = {**NESTED, "proj/reqs/base.txt": NESTED["proj/reqs/base.txt"] + "--index-url http://127.0.0.1:8/s\n"}
    assert read_dependencies(DictFiles(indexed), "proj").hash != base.hash


@pytest.mark.parametrize("line, said", [
    ("-r ../../outside.txt", "outside the project"),
    ("-c /etc/passwd", "outside the project"),
    ("-r missing.txt", "names p/missing.txt, which is not in the project"),
    ("-r https://example.com/reqs.txt", "not a file of the project"),
    ("foo >=< 1", "not a requirement pip can read"),
    ("--no-such-option", "pip cannot read this line"),
    ("-e requests", "only a path or a VCS URL"),
    ("/opt/wheels/x-1-py3-none-any.whl", "a path on this machine"),
    ("./vendored/pkg", "does not ship"),
])
def test_what_pip_would_trip_on_is_said_with_the_line(line: str, said: str) -> None:
    err = _error({"p/requirements.txt": f"ok==1\n{line}\n"}, "p")
    assert said in err.what and err.where == "p/requirements.txt:2" and err.fix


def test_a_loop_of_files_is_refused_with_the_chain() -> None:
    err = _error({"requirements.txt": "-r a/x.txt\n", "a/x.txt": "-c ../requirements.txt\n"})
    assert "loop: requirements.txt -> a/x.txt -> requirements.txt" in err.what


@pytest.mark.parametrize("line", [
    "--index-url https://ada:hunter2-not-a-placeholder@pypi.corp.internal/simple",
    "-i https://ada:hunter2-not-a-placeholder@pypi.corp.internal/simple",
    "--extra-index-url=https://ada:hunter2-not-a-placeholder@pypi.corp.internal/simple",
    "pkg @ https://ada:hunter2-not-a-placeholder@files.corp.internal/pkg-1-py3-none-any.whl",
    "git+https://ghp_0123456789abcdefghijABCDEFGHIJ012345@github.com/o/r.git#egg=r",
])
def test_a_password_in_an_index_url_is_refused_like_a_secret(line: str) -> None:
    err = _error({"requirements.txt": "-r nested.txt\n", "nested.txt": f"ok==1\n{line}\n"})
    assert err.what.startswith("refused: a URL") and err.where == "nested.txt:2"
    assert "gpu secrets set" in err.fix and "hunter2" not in err.message()


def test_a_placeholder_for_pip_to_fill_in_on_the_target_is_fine() -> None:
    deps = read_dependencies(DictFiles({"requirements.txt":
                                        "--index-url https://ada:${PIP_PASSWORD}@pypi.corp.internal/simple\nok\n"}))
    assert deps.options == ["--index-url https://ada:${PIP_PASSWORD}@pypi.corp.internal/simple"]


def test_local_paths_ship_join_the_hash_and_lose_editable() -> None:
    files = {"w/requirements.txt": "-e .\n./wheels/tiny-1.0-py3-none-any.whl\n--find-links wheels\n",
             "w/setup.py": "from setuptools import setup; setup()\n", "w/wheels/tiny-1.0-py3-none-any.whl": "zip"}
    deps = read_dependencies(DictFiles(files), "w")
    assert deps.requirements == [".", "./wheels/tiny-1.0-py3-none-any.whl"]
    assert deps.options == ["--find-links wheels"]
    assert any("-e . is installed as a regular install" in n for n in deps.notes)
    changed = read_dependencies(DictFiles({**files, "w/setup.py": "from setuptools import setup; setup(name='x')\n"}), "w")
    assert changed.hash != deps.hash  # the package's own files change what is installed


def test_pyproject_dependencies_and_the_extras_asked_for() -> None:
    pyproject = ('[project]\nname = "My_Pkg"\ndependencies = ["numpy>=1.24"]\n'
                 '[project.optional-dependencies]\ntrain = ["torch; sys_platform == \'linux\'", "my-pkg[log]"]\n'
                 'log = ["rich"]\nother = ["never"]\n')
    files = {"pyproject.toml": pyproject}
    assert read_dependencies(DictFiles(files)).requirements == ["numpy>=1.24"]
    deps = read_dependencies(DictFiles({**files, "requirements.txt": "ignored-when-extras-are-named\n"}), "", ["train"])
    assert deps.requirements == ["numpy>=1.24", "torch; sys_platform == 'linux'", "rich"]
    assert deps.source == "pyproject.toml"
    err = _error(files, "", ("gpu",))
    assert "not an optional group" in err.what and "log, other, train" in err.what


def test_a_requirements_file_withheld_as_a_credential_is_said_at_submit(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {
        "train.py": "print('hi')\n",
        "requirements.txt": "-r reqs/private.txt\n",
        "reqs/private.txt": "--index-url=https://ada:hunter2-not-a-placeholder@pypi.corp.internal/simple\nok\n"})
    out = run_gpu("submit", "train.py", "--wait-s", "0", cwd=project)
    assert out.returncode == 2, out.stdout
    assert "names reqs/private.txt, which does not ship" in out.stderr
    assert "package index URL with a password" in out.stderr and "hunter2" not in out.stderr
    assert gpu_json("jobs")["jobs"] == []


# -- the property: any tree of linked files -------------------------------------------------

_NAMES = ["requirements.txt", "a.txt", "sub/b.txt", "sub/deep/c.txt", "../up.txt", "/abs.txt", "sub/../a.txt"]


@st.composite
def _trees(draw) -> tuple[dict[str, str], dict[str, str]]:
    files: dict[str, str] = {}
    for rel in draw(st.lists(st.sampled_from(["requirements.txt", "a.txt", "sub/b.txt", "sub/deep/c.txt"]),
                             min_size=1, unique=True)):
        lines = draw(st.lists(st.one_of(
            st.tuples(st.sampled_from(["-r", "-c", "--requirement", "--constraint=", "-r../", "-c ../../"]),
                      st.sampled_from(_NAMES)).map(lambda t: t[0] + ("" if t[0].endswith(("=", "/")) else " ") + t[1]),
            st.sampled_from(["pkg==1", "other>=2 ; python_version > '3'", "# c", "", "--pre", "x \\"])),
            max_size=6))
        files[rel] = "\n".join(lines)
    links = draw(st.dictionaries(st.sampled_from(["link.txt", "sub/link.txt"]),
                                 st.sampled_from(["a.txt", "../a.txt", "../../x", "/etc/passwd", "link.txt"]),
                                 max_size=2))
    return files, links


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_trees())
def test_any_tree_of_linked_files_never_reads_outside_and_always_ends(tree) -> None:
    files, links = tree
    seen = DictFiles(files, links)
    try:
        first = read_dependencies(seen, "")
    except UserError as exc:
        first = exc.message()
    for rel in seen.asked:  # every path the reader asked for is inside the bundle
        assert not rel.startswith(("/", "../")) and rel != ".." and posixpath.normpath(rel) == rel, rel
    again = DictFiles(files, links)
    try:
        second = read_dependencies(again, "")
    except UserError as exc:
        second = exc.message()
    if isinstance(first, str):
        assert first == second
    else:
        assert first is None and second is None or first.hash == second.hash


# -- real pip installs from a loopback index ------------------------------------------------


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A pure-Python wheel written by hand (PEP 427): `import NAME; NAME.VERSION`."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for rel, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{rel},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for rel, text in files.items():
            z.writestr(rel, text)
    return path


@pytest.fixture
def loopback_index(tmp_path: Path):
    """A PEP 503 simple index on 127.0.0.1 offering tinya 1.0 and 2.0 and tinyb 1.0."""
    root = tmp_path / "index"
    (root / "files").mkdir(parents=True)
    for name, versions in {"tinya": ["1.0", "2.0"], "tinyb": ["1.0"]}.items():
        links = []
        for v in versions:
            whl = _wheel(root / "files", name, v)
            sha = hashlib.sha256(whl.read_bytes()).hexdigest()
            links.append(f'<a href="../../files/{whl.name}#sha256={sha}">{whl.name}</a><br>')
        (root / "simple" / name).mkdir(parents=True)
        (root / "simple" / name / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>")
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


JOB = "import tinya, tinyb\nprint('versions', tinya.VERSION, tinyb.VERSION)\n"


@pytest.mark.slow
def test_nested_requirement_and_constraint_files_install_on_the_local_target(home: Path, tmp_path: Path,
                                                                            loopback_index: str) -> None:
    project = make_git_project(tmp_path / "repo", {
        "proj/train.py": JOB,
        "proj/requirements.txt": (f"--index-url {loopback_index}\n-r reqs/base.txt\n"
                                  "tinyb ; python_version >= '3'\nnever-there ; python_version < '3'\n"),
        "proj/reqs/base.txt": "tinya\n-c pins.txt\n",
        "proj/reqs/pins.txt": "tinya==1.0\n",  # the index also has 2.0: the constraint decides
    }) / "proj"
    sub = gpu_json("submit", "train.py", "--wait-s", "0", "--hours", "0.1", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=180)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", log
    assert "versions 1.0 1.0" in log
    assert "(3 requirements, 1 constraints)" in log

    # the same dependencies again: the environment is reused, nothing installed
    again = gpu_json("submit", "train.py", "--wait-s", "0", "--hours", "0.1", "--env", "RUN=2", cwd=project)
    assert wait_state(again["job"]["short_id"], {"done", "failed"}, timeout=180)["state"] == "done"
    assert "reusing environment" in run_gpu("logs", again["job"]["short_id"]).stdout


@pytest.mark.slow
def test_nested_requirement_and_constraint_files_install_on_an_ssh_host(sshd, home: Path, tmp_path: Path,
                                                                       loopback_index: str) -> None:
    """The same project on the ssh target (a real sshd on 127.0.0.1): the host reads nothing
    itself; the flattened lines travel in the spec and pip there gets the same answer."""
    from tests.providers.test_ssh import add_box

    assert add_box(sshd, tmp_path)["probe"]["available"] is True
    project = make_git_project(tmp_path / "repo", {
        "train.py": JOB,
        "requirements.txt": f"--index-url {loopback_index}\n-r reqs/base.txt\ntinyb\n",
        "reqs/base.txt": "tinya\n-c pins.txt\n",
        "reqs/pins.txt": "tinya==1.0\n",
    })
    sub = gpu_json("submit", "train.py", "--provider", "box", "--wait-s", "0", "--hours", "0.1", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=180)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", log
    assert "versions 1.0 1.0" in log and "(2 requirements, 1 constraints)" in log
    venvs = [p for p in (tmp_path / "remote" / "venvs").iterdir() if p.is_dir()]
    assert len(venvs) == 1
    if (venvs[0] / "constraints.txt").exists():  # pip: the flattened lines, as they travelled
        assert (venvs[0] / "constraints.txt").read_text() == "tinya==1.0\n"
    else:  # the host's uv: the exact set the constraint resolved to, linked from its cache
        assert "tinya==1.0" in (venvs[0] / "requirements.txt").read_text().splitlines()
        assert (tmp_path / "remote" / "uv-cache").is_dir()
