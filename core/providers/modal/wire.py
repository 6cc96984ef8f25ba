"""The Modal client as the modal target holds it: built from the keychain's token in memory,
checked with a hello; the token's forms a person may paste.
"""

from __future__ import annotations

from typing import Any

from core.errors import UserError
from core.providers.service import secret_name as _secret_name


def secret_name(target: str) -> str:
    return _secret_name("modal", target)


def parse_token(text: str) -> dict[str, str]:
    """`TOKEN_ID TOKEN_SECRET` (as `modal token new` prints them), or ~/.modal.toml's text."""
    text = text.strip()
    if "token_id" in text:
        import tomllib

        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            raise UserError("the Modal token file is not valid TOML", fix="give ~/.modal.toml as written by "
                            "`modal token new`, or type the token id and secret") from None
        profiles = [v for v in doc.values() if isinstance(v, dict) and v.get("token_id")]
        active = [p for p in profiles if p.get("active")] or profiles
        if not active:
            raise UserError("no profile with token_id and token_secret in the Modal token file")
        text = f"{active[0]['token_id']} {active[0].get('token_secret', '')}"
    parts = text.split()
    if len(parts) != 2 or not parts[0].startswith("ak-") or not parts[1].startswith("as-"):
        raise UserError("a Modal token is an id (ak-...) and a secret (as-...)",
                        fix="create one at modal.com > Settings > API Tokens (or `modal token new`) "
                            "and give both, separated by a space")
    return {"token_id": parts[0], "token_secret": parts[1]}


class ModalWire:
    """The client of a modal target (mixed into ModalProvider: uses its name and `_credentials`)."""

    _client_obj: Any = None

    def client(self):
        """One client per provider object, built from the token in memory (no environment)."""
        if self._client_obj is None:
            import modal

            c = self._credentials()
            self._client_obj = modal.Client.from_credentials(c["token_id"], c["token_secret"])
        return self._client_obj

    def _hello(self) -> None:
        import modal.exception

        try:
            self.client().hello()
        except modal.exception.AuthError:
            self._client_obj = None
            raise UserError(f"Modal refused the token of target {self.name}",
                            fix=f"store a new one: gpu targets add modal {self.name}") from None
