"""The one way a request to a GPU cloud account leaves gpu-router: reads only.

Two verbs and nothing else: `get(url)` sends a GET; `query(url, document)` sends a POST whose
body is a GraphQL document that `graphql_ops.check_query` found to hold only queries (and
fragments). Both end in `_send`, which builds every request itself and refuses any method but
GET, and a POST unless it carries a checked query document, so no caller can hand it a
mutation, a DELETE or a body of its own. There is no generic `request(method, ...)`.

Also here, because they guard the API key that rides on every request: redirects are refused
(urllib would follow one to another host with the Authorization header), only http(s) URLs
are read, and plain http only to this machine (a test's loopback fake); answers are capped.
"""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from core.providers.accounts.graphql_ops import NotAQuery, check_query

MAX_BYTES = 8 << 20  # a price list is kilobytes; more is not an answer we want
USER_AGENT = "gpu-router (read-only account reader)"


class ReadOnlyRefused(ValueError):
    """A request that is not a read; it never left this machine."""


class AccountError(Exception):
    """A read that failed: the provider was unreachable, slow, or answered with an error."""

    def __init__(self, what: str, *, status: int | None = None) -> None:
        super().__init__(what)
        self.status = status


class KeyRefused(AccountError):
    """The provider refused the API key (HTTP 401 or 403): expired, revoked or mistyped."""


class Timeout(AccountError):
    """The provider did not answer within the timeout."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001
        return None  # urllib then raises HTTPError for the 3xx: nothing follows it


_OPENER = urllib.request.build_opener(_NoRedirect)


def get(url: str, *, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
        timeout: float = 3.0) -> Any:
    """GET `url` (with `params` as its query string) and return the JSON it answers."""
    if params:
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode(params, doseq=True)
    return _send("GET", url, headers=headers or {}, timeout=timeout)


def query(url: str, document: str, *, variables: dict[str, Any] | None = None,
          headers: dict[str, str] | None = None, timeout: float = 3.0) -> Any:
    """POST a GraphQL query document to `url` and return its `data`; any document that is not
    made of queries only is refused before anything is sent."""
    try:
        check_query(document)
    except NotAQuery as exc:
        raise ReadOnlyRefused(f"not a GraphQL query: {exc}") from None
    doc = _send("POST", url, headers=headers or {}, timeout=timeout, document=document,
                variables=variables or {})
    if not isinstance(doc, dict):
        raise AccountError("the answer is not a GraphQL response")
    errors = doc.get("errors")
    if errors and not doc.get("data"):
        first = errors[0] if isinstance(errors, list) and errors else {}
        message = str(first.get("message", first) if isinstance(first, dict) else first)[:200]
        if any(w in message.lower() for w in ("unauthorized", "unauthenticated", "api key", "forbidden")):
            raise KeyRefused(f"it refused the API key ({message})", status=401)
        raise AccountError(f"it answered with an error: {message}")
    return doc.get("data")


def check_url(url: str) -> None:
    """http(s) only, and plain http only to this machine: the key is sent with the request."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ReadOnlyRefused(f"only http(s) URLs are read (got {url[:80]!r})")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ReadOnlyRefused(f"plain http is used only for this machine (got {parts.hostname[:80]!r}); "
                              "use https")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _send(method: str, url: str, *, headers: dict[str, str], timeout: float,
          document: str | None = None, variables: dict[str, Any] | None = None) -> Any:
    """The only place a request is made. GET has no body; POST carries exactly
    {"query": document, "variables": ...} for a document checked again here."""
    if method == "GET":
        if document is not None:
            raise ReadOnlyRefused("a GET carries no document")
        body = None
    elif method == "POST":
        try:
            check_query(document)  # type: ignore[arg-type]
        except NotAQuery as exc:
            raise ReadOnlyRefused(f"a POST carries only a GraphQL query: {exc}") from None
        body = json.dumps({"query": document, "variables": variables or {}}).encode()
    else:
        raise ReadOnlyRefused(f"{method!r} is not a read; only GET and GraphQL queries are sent")
    check_url(url)
    req = urllib.request.Request(url, data=body, method=method)
    for key, value in headers.items():
        if key.lower() in ("content-length", "transfer-encoding", "host"):
            continue
        req.add_header(key, value)
    req.add_header("Accept", "application/json")
    req.add_header("User-Agent", USER_AGENT)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            data = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise KeyRefused(f"it refused the API key (HTTP {exc.code})", status=exc.code) from None
        if 300 <= exc.code < 400:
            raise AccountError(f"it answered with a redirect (HTTP {exc.code}), which is not followed",
                               status=exc.code) from None
        raise AccountError(f"it answered HTTP {exc.code}", status=exc.code) from None
    except TimeoutError:
        raise Timeout(f"no answer within {timeout:g} s") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise Timeout(f"no answer within {timeout:g} s") from None
        raise AccountError(f"unreachable ({exc.reason})") from None
    except OSError as exc:
        raise AccountError(f"unreachable ({exc})") from None
    if len(data) > MAX_BYTES:
        raise AccountError(f"its answer is over {MAX_BYTES >> 20} MiB")
    try:
        return json.loads(data)
    except ValueError:
        raise AccountError("its answer is not JSON") from None
