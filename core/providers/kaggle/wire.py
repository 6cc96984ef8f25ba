"""Kaggle's API as the kaggle target speaks it: the official SDK's client, bounded and with
errors in one line, the account's name and quota, a kernel's status and output, a download.

Kept apart from the target's job steps so that what crosses the wire (and how a failure of the
service reads) is in one place; every call here blocks and is run in a thread by the target.
Credentials are read into memory only (ServiceTarget._credentials), never an environment, a
file or a command line.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from core.errors import UserError
from core.providers.service import secret_name as _secret_name

API_TIMEOUT_S = 60.0  # one API call; uploads have upload_timeout_s
WEEKLY_HOURS = 30.0  # what Kaggle grants a verified account, when its quota cannot be read


def secret_name(target: str) -> str:
    return _secret_name("kaggle", target)


def parse_credentials(text: str) -> dict[str, str]:
    """kaggle.json ({"username", "key"}) or an API token (KGAT_..., or {"token": ...})."""
    text = text.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            raise UserError("the Kaggle credentials are not valid JSON",
                            fix="give kaggle.json as downloaded, or the API token itself") from None
        if isinstance(doc, dict) and doc.get("username") and doc.get("key"):
            return {"username": str(doc["username"]), "key": str(doc["key"])}
        if isinstance(doc, dict) and doc.get("token"):
            return {"token": str(doc["token"])}
        raise UserError("kaggle.json must hold username and key",
                        fix="download it again from kaggle.com > Settings > API > Create New Token")
    if not text or any(c.isspace() for c in text):
        raise UserError("a Kaggle API token is one word", fix="paste the token from kaggle.com > Settings > API")
    return {"token": text}


def _seconds(value: Any) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value or 0)


def unreachable(exc: BaseException) -> RuntimeError:
    """A network failure talking to Kaggle, in one line: what failed, not urllib3's retry
    story (`HTTPSConnectionPool(host=...): Max retries exceeded ... Caused by ProxyError(...)`)."""
    import requests

    if isinstance(exc, requests.exceptions.ProxyError):
        cause = "the proxy did not let it through"
    elif isinstance(exc, requests.Timeout):
        cause = "timeout: no answer in time"
    elif isinstance(exc, requests.ConnectionError):
        cause = "no connection: offline, or its name did not resolve"
    else:
        cause = type(exc).__name__
    return RuntimeError(f"Kaggle could not be reached ({cause})")



class KaggleWire:
    """The API calls of a kaggle target (mixed into KaggleProvider: uses its name, options
    and `_credentials`)."""

    def _client(self):
        from kagglesdk import KaggleClient

        c = self._credentials()
        return KaggleClient(username=c.get("username"), password=c.get("key"), api_token=c.get("token"))

    def _bounded(self, client) -> None:
        """Every request of this client gives up after `api_timeout_s`: the SDK sends without a
        timeout, and a call that hangs would hold one of the supervisor's worker threads for
        good. The SDK's own session (made on entering the client) gets an adapter that sets it."""
        from requests.adapters import HTTPAdapter

        timeout = float(self.options.get("api_timeout_s") or API_TIMEOUT_S)

        class Bounded(HTTPAdapter):
            def send(self, request, **kw):  # noqa: ANN001 - requests' signature
                kw["timeout"] = kw.get("timeout") or timeout
                return super().send(request, **kw)

        session = getattr(client.http_client(), "_session", None)
        if session is not None:
            session.mount("http://", Bounded())
            session.mount("https://", Bounded())

    def _call(self, service: str, method: str, request: Any) -> Any:
        """One API call, blocking (run it in a thread); an HTTP error says what Kaggle said."""
        import requests

        with self._client() as client:
            self._bounded(client)
            api = getattr(client, service)
            api = getattr(api, {"kernels": "kernels_api_client", "datasets": "dataset_api_client",
                                "blobs": "blob_api_client"}[service])
            try:
                return getattr(api, method)(request)
            except requests.HTTPError as exc:
                status = exc.response.status_code if exc.response is not None else "?"
                text = (exc.response.text[:300] if exc.response is not None else "").strip()
                if status in (401, 403):
                    raise UserError(f"Kaggle refused the credentials of target {self.name} ({status})",
                                    fix=f"store new ones: gpu targets add kaggle {self.name}") from None
                raise RuntimeError(f"Kaggle {method} answered {status}: {text}") from None
            except requests.RequestException as exc:
                raise unreachable(exc) from None

    def user(self) -> str:
        """The account's user name: kaggle.json's, or the one the API says the token is for."""
        if self._user is None:
            c = self._credentials()
            if c.get("username"):
                self._user = c["username"]
            else:
                from kagglesdk.security.types.oauth_service import IntrospectTokenRequest

                import requests

                with self._client() as client:
                    self._bounded(client)
                    r = IntrospectTokenRequest()
                    r.token = c["token"]
                    try:
                        answer = client.security.oauth_client.introspect_token(r)
                    except requests.RequestException as exc:  # urllib3's retry story: one line
                        raise unreachable(exc) from None
                if not answer.active or not answer.username:
                    raise UserError(f"the Kaggle token of target {self.name} is not active",
                                    fix=f"store a new one: gpu targets add kaggle {self.name}")
                self._user = answer.username
        return self._user

    def quota(self) -> dict:
        """Kaggle's own account of the weekly GPU hours: used, allowed, left, and when it resets."""
        from kagglesdk.kernels.types.kernels_api_service import ApiGetAcceleratorQuotaStatisticsRequest

        r = self._call("kernels", "get_accelerator_quota_statistics", ApiGetAcceleratorQuotaStatisticsRequest())
        q = r.gpu_quota
        allowed = _seconds(q.total_time_allowed) / 3600 if q is not None and q.total_time_allowed else WEEKLY_HOURS
        used = (_seconds(q.time_used) + _seconds(q.time_reserved)) / 3600 if q is not None else 0.0
        reset = r.quota_refresh_time.isoformat() if getattr(r, "quota_refresh_time", None) else None
        return {"used_hours": round(used, 3), "allowed_hours": round(allowed, 3),
                "left_hours": round(max(allowed - used, 0.0), 3), "resets_at": reset}

    def _kernel_status(self, slug: str) -> tuple[str, str]:
        from kagglesdk.kernels.types.kernels_api_service import ApiGetKernelSessionStatusRequest

        req = ApiGetKernelSessionStatusRequest()
        req.user_name, req.kernel_slug = self.user(), slug
        r = self._call("kernels", "get_kernel_session_status", req)
        name = r.status.name if hasattr(r.status, "name") else str(r.status)
        return name, r.failure_message or ""

    def _kernel_output(self, slug: str) -> tuple[list[tuple[str, str]], str]:
        from kagglesdk.kernels.types.kernels_api_service import ApiListKernelSessionOutputRequest

        files: list[tuple[str, str]] = []
        log, token = "", None
        for _ in range(100):
            req = ApiListKernelSessionOutputRequest()
            req.user_name, req.kernel_slug = self.user(), slug
            if token:
                req.page_token = token
            r = self._call("kernels", "list_kernel_session_output", req)
            files += [(f.file_name, f.url) for f in r.files or []]
            log = log or (r.log or "")
            token = r.next_page_token
            if not token:
                break
        return files, log

    def _download(self, url: str, limit: int) -> bytes:
        import requests

        with requests.get(url, stream=True, timeout=300) as r:
            r.raise_for_status()
            out = bytearray()
            for block in r.iter_content(1 << 20):
                out += block
                if len(out) > limit:
                    raise RuntimeError(f"a Kaggle output file is over {limit} bytes")
            return bytes(out)
