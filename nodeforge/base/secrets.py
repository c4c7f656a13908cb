"""BMC credential references: ``env:VAR``, ``file:PATH``, ``fernet:TOKEN``.

An inventory never needs to hold a password: it names where the password is.

* ``env:BMC_PASSWORD`` - an environment variable of the nodeforge process.
* ``file:secrets/rack1.pw`` - a UTF-8 file (relative to the inventory); one
  trailing newline (``\n`` or ``\r\n``) is stripped.
* ``fernet:gAAAA...`` - encrypted with a Fernet key held *outside* the
  inventory: ``$NODEFORGE_INVENTORY_KEY`` or the file named by
  ``$NODEFORGE_INVENTORY_KEY_FILE`` / ``--key-file``.

Anything else is plaintext, refused unless explicitly allowed
(``allow_plaintext``). Every resolved value is a :class:`~nodeforge.redact.Secret`
(registered for log scrubbing). Error messages name the reference, never a value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

from nodeforge.errors import ExitCode, NodeforgeError
from nodeforge.redact import Secret

KEY_ENV = "NODEFORGE_INVENTORY_KEY"
KEY_FILE_ENV = "NODEFORGE_INVENTORY_KEY_FILE"
SCHEMES = ("env", "file", "fernet")


class SecretRefError(NodeforgeError):
    """A reference that cannot be resolved, or a bad key: bad input (exit 2),
    whether it came from an option, the environment or the inventory."""

    message = "{detail}"
    exit_code = ExitCode.USAGE


class KeyMissingError(SecretRefError):
    message = ("an encrypted credential needs the inventory key: set ${env} or ${env_file}, "
               "or pass --key-file")


@dataclasses.dataclass(frozen=True)
class SecretRef:
    """A parsed reference; ``kind`` is env/file/fernet/plain."""

    kind: str
    target: str  # variable name, path or token; for plain: "" (never kept)

    def describe(self) -> str:
        if self.kind == "plain":
            return "plaintext value"
        if self.kind == "fernet":
            return "fernet:<encrypted>"
        return f"{self.kind}:{self.target}"


def parse_ref(text: str) -> SecretRef:
    scheme, sep, rest = text.partition(":")
    if sep and scheme in SCHEMES and rest:
        return SecretRef(scheme, rest)
    return SecretRef("plain", "")


def load_key(key_file: Path | None = None) -> bytes | None:
    """The Fernet key from ``key_file``, $NODEFORGE_INVENTORY_KEY or the file
    in $NODEFORGE_INVENTORY_KEY_FILE (first found), else None. A key that
    cannot be read or is not a Fernet key is a SecretRefError naming where it
    came from (never the key)."""
    if key_file is None and os.environ.get(KEY_ENV):
        return check_key(os.environ[KEY_ENV].strip().encode(), f"${KEY_ENV}")
    path = key_file or (Path(os.environ[KEY_FILE_ENV]) if os.environ.get(KEY_FILE_ENV) else None)
    if path is None:
        return None
    try:
        data = Path(path).read_bytes().strip()
    except OSError as exc:
        raise SecretRefError(detail=f"cannot read inventory key file {path}: {exc.strerror}") from None
    return check_key(data, f"inventory key file {path}")


def check_key(key: bytes, source: str) -> bytes:
    """``key`` if it is a Fernet key (32 url-safe base64-encoded bytes)."""
    from cryptography.fernet import Fernet

    try:
        Fernet(key)
    except (ValueError, TypeError):
        raise SecretRefError(detail=f"{source} does not hold a Fernet key (32 url-safe base64-encoded bytes, "
                                    "as 'nodeforge baremetal keygen' writes)") from None
    return key


def strip_newline(value: str) -> str:
    """``value`` without one trailing newline (``\\n`` or ``\\r\\n``)."""
    if value.endswith("\r\n"):
        return value[:-2]
    return value[:-1] if value.endswith("\n") else value


def generate_key() -> bytes:
    from cryptography.fernet import Fernet

    return Fernet.generate_key()


def encrypt(value: str, key: bytes) -> str:
    """``fernet:<token>`` for ``value`` (what `nodeforge baremetal encrypt` prints)."""
    from cryptography.fernet import Fernet

    return "fernet:" + Fernet(key).encrypt(value.encode()).decode()


class Resolver:
    """Resolves references relative to ``base_dir``; caches the key."""

    def __init__(self, base_dir: Path, *, allow_plaintext: bool = False, key: bytes | None = None,
                 environ: dict | None = None):
        self.base_dir = Path(base_dir)
        self.allow_plaintext = allow_plaintext
        self._key = key
        self.environ = os.environ if environ is None else environ

    def resolve(self, raw: str) -> Secret:
        """The secret a reference points at. Raises SecretRefError (no value in it)."""
        ref = parse_ref(raw)
        if ref.kind == "plain":
            Secret(raw)  # register: it must never print, even in the refusal
            if not self.allow_plaintext:
                raise SecretRefError(detail="plaintext secret refused; use env:VAR, file:PATH or "
                                            "fernet:TOKEN (or --allow-plaintext-secrets)")
            return Secret(raw)
        if ref.kind == "env":
            value = self.environ.get(ref.target)
            if not value:
                raise SecretRefError(detail=f"environment variable {ref.target} is not set or empty")
            return Secret(value)
        if ref.kind == "file":
            path = Path(ref.target).expanduser()
            if not path.is_absolute():
                path = self.base_dir / path
            try:
                value = path.read_bytes().decode("utf-8")
            except OSError as exc:
                raise SecretRefError(detail=f"cannot read secret file {path}: {exc.strerror}") from None
            except UnicodeDecodeError:
                raise SecretRefError(detail=f"secret file {path} is not UTF-8 text") from None
            value = strip_newline(value)
            if not value:
                raise SecretRefError(detail=f"secret file {path} is empty")
            return Secret(value)
        # fernet
        from cryptography.fernet import Fernet, InvalidToken

        if self._key is None:
            self._key = load_key()
        if self._key is None:
            raise KeyMissingError(env=KEY_ENV, env_file=KEY_FILE_ENV)
        try:
            value = Fernet(self._key).decrypt(ref.target.encode()).decode()
        except (InvalidToken, ValueError):
            raise SecretRefError(detail="encrypted credential does not decrypt with the inventory key "
                                        "(wrong key or corrupted token)") from None
        return Secret(value)


def fingerprint(username: str, password: Secret, salt: str) -> str:
    """A credential fingerprint kept on the node (``extra``) to detect rotation.

    Ironic masks passwords on read, so nodeforge cannot compare them; it stores
    this instead. scrypt with a per-node salt (the BMC address) makes it costly
    to brute-force a password from the fingerprint."""
    digest = hashlib.scrypt(f"{username}\0{password.reveal()}".encode(), salt=f"nodeforge:{salt}".encode(),
                            n=2 ** 12, r=8, p=1, dklen=16)
    return "scrypt1:" + digest.hex()
