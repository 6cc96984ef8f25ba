"""The one place that talks to the OS keychain through `keyring`.

Accepts native backends only (macOS Keychain, Windows Credential Locker, SecretService,
KWallet): `keyrings.alt` would silently store plaintext, and the `fail` backend means no
keychain is reachable (a headless box over SSH without a D-Bus session).
"""

from __future__ import annotations

from core.errors import UserError

SERVICE = "gpu-router"
NATIVE_MODULES = ("keyring.backends.macOS", "keyring.backends.Windows",
                  "keyring.backends.SecretService", "keyring.backends.kwallet",
                  "keyring.backends.libsecret")
NO_KEYCHAIN_FIX = (
    "gpu-router keeps secrets only in the OS keychain. On macOS it is always there; on Linux "
    "start a Secret Service (GNOME Keyring or KWallet) in your desktop session, or on a "
    "headless box run: dbus-run-session -- sh -c 'echo -n PASSWORD | gnome-keyring-daemon "
    "--unlock --components=secrets; exec $SHELL' and use gpu from that shell")


def backend():
    import keyring
    from keyring.backends import chainer

    kr = keyring.get_keyring()
    chosen = [kr]
    if isinstance(kr, chainer.ChainerBackend):
        chosen = list(kr.backends)
    native = [b for b in chosen if type(b).__module__.startswith(NATIVE_MODULES)]
    if not native:
        names = ", ".join(f"{type(b).__module__}.{type(b).__name__}" for b in chosen) or "none"
        raise UserError(f"no native keychain is available (keyring backend: {names})",
                        fix=NO_KEYCHAIN_FIX)
    return native[0]


def _call(fn, *args):
    from keyring.errors import KeyringError

    try:
        return fn(*args)
    except KeyringError as exc:
        raise UserError(f"the keychain refused: {exc}", fix=NO_KEYCHAIN_FIX) from None


def get(name: str) -> str | None:
    return _call(backend().get_password, SERVICE, name)


def set(name: str, value: str) -> None:  # noqa: A001 - mirrors keyring's verbs
    _call(backend().set_password, SERVICE, name, value)


def delete(name: str) -> bool:
    from keyring.errors import PasswordDeleteError

    try:
        _call(backend().delete_password, SERVICE, name)
    except PasswordDeleteError:
        return False
    return True
