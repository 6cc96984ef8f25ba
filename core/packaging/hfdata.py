"""hf://datasets/ URIs, resolved on the machine that submits.

The revision is pinned to its commit sha and the files are downloaded once, with the real
`huggingface_hub` client, into gpu-router's content cache (`<data dir>/cache/hf/OWNER/NAME/SHA/`).
From then on the data set is a local one: hashed by content, shipped once per content hash per
target like any `NAME=PATH`, read in place on the local target. A target never talks to the Hub,
so it needs neither network access nor `huggingface_hub`, and the token never leaves this machine.

- A URI that pins a full commit sha and is already cached costs no network call at all; a
  branch or tag (`main` when none is given) costs one metadata call to learn its sha.
- The token is `HF_TOKEN` from the keychain (`gpu secrets set HF_TOKEN`), passed to the client as
  `token=`; without one the client is told `token=False`, so neither `hf auth login`'s stored
  token nor an `HF_TOKEN` variable in the shell is sent behind the user's back.
- Every request has a bounded timeout, and a download goes into a temporary folder that is renamed
  into place only when complete: an interrupted one leaves no entry that looks whole.
"""

from __future__ import annotations

import hashlib
import glob
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from core import paths
from core.config.request import DataSpec, HF_FORM, parse_hf
from core.errors import UserError, shorten
from core.secrets import keychain

TOKEN_NAME = "HF_TOKEN"
TIMEOUT_S = 20.0  # each connect, read or write of one request; the Hub answers metadata in < 1 s
SHA_CHARS = frozenset("0123456789abcdef")
_TIMEOUTS = ("connect", "read", "write", "pool")


def cache_root() -> Path:
    return paths.hf_data_dir()


def is_commit(revision: str | None) -> bool:
    return revision is not None and len(revision) == 40 and set(revision) <= SHA_CHARS


def resolve(spec: DataSpec, *, may_read_token: bool = True) -> DataSpec:
    """The local copy of an hf:// data set, downloaded here unless already cached; other data
    sets come back unchanged.

    `may_read_token` is False for an agent's submit: reading a keychain secret needs a person's
    yes (the contract's rule), so only a public data set, or a commit already cached, resolves;
    one that needs the token is an error that says how a person gets it cached."""
    if spec.kind != "hf":
        return spec
    parts = parse_hf(spec.source)  # checked when the request was built
    owner, name, path = str(parts["owner"]), str(parts["repo"]), parts["path"]
    revision = parts["revision"]
    where = f"data {spec.name}"
    if is_commit(revision):  # immutable: a cached copy is the answer, no Hub needed
        folder = _folder(owner, name, str(revision), path)
        if folder.is_dir():
            return _local(spec, owner, name, str(revision), path, folder, where)
    hub = _client()
    token, no_keychain = _token() if may_read_token else (None, None)
    repo = f"{owner}/{name}"
    try:
        info = hub.HfApi().dataset_info(repo, revision=revision, token=token or False,
                                        timeout=TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - every failure of the client becomes a UserError
        if not may_read_token and _token_would_help(exc):
            raise _needs_a_person(spec.source, repo, where) from None
        raise _explain(exc, spec.source, repo, revision, token, no_keychain, where) from None
    sha = str(info.sha or "")
    if not is_commit(sha):
        raise UserError(f"the Hub at {_endpoint()} answered for {repo} without a "
                        f"commit sha ({shorten(sha)})", where=where,
                        fix="check HF_ENDPOINT: it must point at a Hugging Face Hub")
    folder = _folder(owner, name, sha, path)
    if not folder.is_dir():
        try:
            _download(hub, repo, sha, path, token, folder, spec.source, where)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, OSError) and not _is_hub_error(exc):
                raise  # this machine's disk: the caller's disk-full guard says so
            raise _explain(exc, spec.source, repo, sha, token, no_keychain, where) from None
    return _local(spec, owner, name, sha, path, folder, where)


def _token_would_help(exc: BaseException) -> bool:
    """A refusal that a token could lift: not found (private looks like missing), 401/403,
    gated; a missing revision or file of a repository the Hub showed is not one."""
    from huggingface_hub import errors

    if isinstance(exc, (errors.RevisionNotFoundError, errors.EntryNotFoundError)):
        return False
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return isinstance(exc, (errors.RepositoryNotFoundError, errors.GatedRepoError)) or status in (401, 403, 404)


def _needs_a_person(uri: str, repo: str, where: str) -> UserError:
    return UserError(f"{uri}: the Hub at {_endpoint()} has no public data set {repo}; if it is private "
                     f"or gated, reading {TOKEN_NAME} from the keychain to download it needs a person: "
                     "an agent's submit never reads a keychain secret before a person says yes",
                     where=where,
                     fix=f"check the name; for a private data set, ask the user to store its token "
                         f"(`gpu secrets set {TOKEN_NAME}`) and run this submit once at their own "
                         f"terminal: it downloads and caches the data set, and a later submit that pins "
                         f"the commit it shows (hf://datasets/{repo}@SHA) needs no token")


def _folder(owner: str, name: str, sha: str, path: str | None) -> Path:
    """Where one selection of one commit lives: `all` for the whole repository, else a folder
    per path (two URIs into the same commit never see each other's half of it)."""
    selection = "all" if not path else "path-" + hashlib.sha256(path.encode()).hexdigest()[:16]
    return cache_root() / owner / name / sha / selection


def _local(spec: DataSpec, owner: str, name: str, sha: str, path: str | None, folder: Path,
           where: str) -> DataSpec:
    source = folder / path if path else folder
    if not (source.is_file() or source.is_dir()):
        raise _no_such_path(spec.source, f"{owner}/{name}", path, sha, where)
    pinned = f"hf://datasets/{owner}/{name}@{sha}" + (f"/{path}" if path else "")
    return DataSpec(name=spec.name, source=str(source), kind="path", origin=pinned)


def _no_such_path(uri: str, repo: str, path: str | None, sha: str, where: str) -> UserError:
    return UserError(f"{uri}: {repo} has no file or folder {shorten(path)} at commit {sha[:12]}",
                     where=where, fix=f"check the path on the data set's page, or leave it out "
                                      f"({HF_FORM})")


def _download(hub: Any, repo: str, sha: str, path: str | None, token: str | None, final: Path,
              uri: str, where: str) -> None:
    """The selection into a temporary folder beside `final`, renamed into place when whole."""
    final.parent.mkdir(parents=True, exist_ok=True)
    _sweep(final.parent)
    tmp = final.parent / f".part-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    patterns = None
    if path:
        escaped = glob.escape(path)  # a `[` in a file name is a name, not a pattern
        patterns = [escaped, escaped + "/*"]
    try:
        hub.snapshot_download(repo_id=repo, repo_type="dataset", revision=sha, local_dir=tmp,
                              cache_dir=cache_root() / ".hub", allow_patterns=patterns,
                              token=token or False, etag_timeout=TIMEOUT_S, max_workers=4)
        meta = tmp / ".cache"
        shutil.rmtree(meta / "huggingface", ignore_errors=True)  # the client's own bookkeeping
        if meta.is_dir() and not any(meta.iterdir()):
            meta.rmdir()
        if path and not (tmp / path).exists():
            raise _no_such_path(uri, repo, path, sha, where)
        tmp.mkdir(exist_ok=True)  # an empty repository is still an answer
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # not another submit that finished first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sweep(parent: Path) -> None:
    """Temporary folders of downloads whose process is gone (killed, or the machine slept)."""
    for part in parent.glob(".part-*"):
        try:
            pid = int(part.name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(part, ignore_errors=True)
        except (ValueError, IndexError, PermissionError, OSError):
            continue


def _token() -> tuple[str | None, str | None]:
    """(HF_TOKEN from the keychain or None, why the keychain could not be asked or None)."""
    try:
        return keychain.get(TOKEN_NAME), None
    except UserError as exc:  # no keychain here: public data sets still work
        return None, exc.what


_CLIENT: Any = None


def _client() -> Any:
    """`huggingface_hub`, imported on first use (a job without hf:// data never pays for it),
    quiet (what reaches the terminal goes through the CLI's output) and with every request's
    timeouts bounded (the client leaves some of them unbounded)."""
    global _CLIENT
    if _CLIENT is None:
        try:
            import huggingface_hub as hub
            from huggingface_hub import utils
        except ImportError:
            raise UserError("hf:// data needs the huggingface_hub package on this machine",
                            fix="pip install huggingface_hub (a dependency of gpu-router)") from None
        utils.disable_progress_bars()
        utils.logging.set_verbosity_error()
        session = utils.get_session()
        hooks = session.event_hooks
        if _bound_timeouts not in hooks["request"]:
            session.event_hooks = {**hooks, "request": [*hooks["request"], _bound_timeouts]}
        _CLIENT = hub
    return _CLIENT


def _bound_timeouts(request: Any) -> None:
    """An httpx request hook: a timeout left unset (None, wait forever) becomes TIMEOUT_S."""
    given = request.extensions.get("timeout") or {}
    request.extensions["timeout"] = {k: TIMEOUT_S if given.get(k) is None else given[k]
                                     for k in _TIMEOUTS}


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _is_hub_error(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in ("huggingface_hub", "httpx2", "httpcore2")


def _explain(exc: BaseException, uri: str, repo: str, revision: str | None, token: str | None,
             no_keychain: str | None, where: str) -> UserError:
    """What the client raised, as what went wrong and what to do."""
    from huggingface_hub import constants, errors

    hub = constants.ENDPOINT
    page = f"{hub}/datasets/{repo}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    store = f"store a token that can read it: `gpu secrets set {TOKEN_NAME}`"
    if no_keychain:
        store += f" (the keychain could not be asked: {no_keychain})"
    if isinstance(exc, errors.OfflineModeIsEnabled) or constants.is_offline_mode():
        return UserError(f"{uri}: HF_HUB_OFFLINE is set, so the Hub is not asked and commit "
                         f"{shorten(revision)} of {repo} is not in gpu-router's cache", where=where,
                         fix="unset HF_HUB_OFFLINE for this submit (a URI pinned to a commit sha "
                             "works offline once it was downloaded)")
    if isinstance(exc, errors.RevisionNotFoundError):
        return UserError(f"{uri}: {repo} has no revision {shorten(revision)}", where=where,
                         fix=f"use a branch, tag or commit sha of {page}, or leave @REVISION out "
                             "for its main branch")
    if isinstance(exc, errors.GatedRepoError):
        if not token:
            return UserError(f"{uri}: {repo} is gated: it needs a token", where=where,
                             fix=f"accept its conditions at {page}, then {store}")
        return UserError(f"{uri}: {repo} is gated and the {TOKEN_NAME} in the keychain has not "
                         "been granted access", where=where,
                         fix=f"accept its conditions at {page} with the account of that token")
    if status == 401 and not isinstance(exc, errors.RepositoryNotFoundError):
        return UserError(f"{uri}: the Hub at {hub} refused the {TOKEN_NAME} from the keychain "
                         "(invalid credentials)", where=where,
                         fix=f"store a valid token: `gpu secrets set {TOKEN_NAME}`")
    if isinstance(exc, errors.RepositoryNotFoundError) or status in (401, 403, 404):
        if token:
            return UserError(f"{uri}: the Hub at {hub} has no data set {repo} that the "
                             f"{TOKEN_NAME} in the keychain can read (HTTP {status})", where=where,
                             fix=f"check the name at {page}, and that the token has access to it")
        return UserError(f"{uri}: the Hub at {hub} has no public data set {repo} (HTTP {status}); "
                         "a private or gated one needs a token", where=where,
                         fix=f"check the name at {page}; for a private data set {store}")
    if isinstance(exc, errors.EntryNotFoundError):
        return UserError(f"{uri}: a file of {repo} listed at commit {shorten(revision)} could not "
                         "be downloaded (not found)", where=where, fix="submit again; if it "
                         "persists, pin another commit of the data set")
    if isinstance(exc, errors.HfHubHTTPError) and status is not None:
        return UserError(f"{uri}: the Hub at {hub} answered HTTP {status}", where=where,
                         fix="try again in a while (https://status.huggingface.co)")
    if _is_hub_error(exc) or isinstance(exc, (OSError, TimeoutError)):
        return UserError(f"{uri}: the Hub at {hub} could not be reached or stopped answering "
                         f"({type(exc).__name__}: {shorten(str(exc), 200)})", where=where,
                         fix="check the network (and HF_ENDPOINT if you set it), then submit again")
    return UserError(f"{uri}: downloading from the Hub failed ({type(exc).__name__}: "
                     f"{shorten(str(exc), 200)})", where=where, fix="submit again")
