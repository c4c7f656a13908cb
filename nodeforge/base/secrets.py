"""BMC credential references: ``env:VAR``, ``file:PATH``, ``fernet:TOKEN``.

An inventory never needs to hold a password: it names where the password is.

* ``env:BMC_PASSWORD`` - an environment variable of the nodeforge process, if
  its name is on the allow-list (:class:`Policy`).
* ``file:secrets/rack1.pw`` - a UTF-8 file (relative to the inventory); one
  trailing newline (``\n`` or ``\r\n``) is stripped, another newline is refused.
* ``fernet:gAAAA...`` - encrypted with a Fernet key held *outside* the
  inventory: ``$NODEFORGE_INVENTORY_KEY`` or the file named by
  ``$NODEFORGE_INVENTORY_KEY_FILE`` / ``--key-file``.

Anything else is plaintext, refused unless explicitly allowed
(``allow_plaintext``). Every resolved value is a :class:`~nodeforge.redact.Secret`
(registered for log scrubbing). Error messages name the reference, never a value.

An inventory may come from somewhere less trusted than the machine that reads
it, so what its references may reach is bounded (:class:`Policy`,
docs/inventory.md "Secrets"): ``file:`` only inside the inventory's directory
or the configured secrets directory (after symlinks are resolved), only a
regular file of at most :data:`FILE_LIMIT` bytes (never a FIFO, a device or a
/proc file, so nothing hangs or grows without bound); ``env:`` only the
variables on the allow-list, which only the environment (the operator) can
extend. A reference given on the command line (e.g. a signing key's
passphrase) is the operator's own: :meth:`Policy.operator` lets it point
anywhere, with the same file kind and size bounds. Key files and a password
on standard input are bounded the same way (:data:`KEY_LIMIT`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
from pathlib import Path
from typing import BinaryIO, Callable, Mapping

from nodeforge.errors import ExitCode, NodeforgeError
from nodeforge.redact import Secret

KEY_ENV = "NODEFORGE_INVENTORY_KEY"
KEY_FILE_ENV = "NODEFORGE_INVENTORY_KEY_FILE"
SCHEMES = ("env", "file", "fernet")

# Where file: references may point besides the inventory's own directory (the --secrets-dir option).
SECRETS_DIR_ENV = "NODEFORGE_SECRETS_DIR"
# Comma-separated names env: references may use besides the defaults.
ENV_ALLOW_ENV = "NODEFORGE_SECRET_ENV_ALLOW"
# env: may always use names with this prefix ...
ENV_PREFIX = "NODEFORGE_SECRET_"
# ... and these, the names the documentation and its examples use.
DEFAULT_ENV_NAMES = ("BMC_PASSWORD", "NF_TEST_BMC_PASSWORD")
# Never readable through env:, whatever the allow-list says: nodeforge's own configuration and the
# inventory key (a reference naming it would send the key to a BMC).
NEVER_ENV_NAMES = frozenset({KEY_ENV, KEY_FILE_ENV, SECRETS_DIR_ENV, ENV_ALLOW_ENV})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

FILE_LIMIT = 64 * 1024   # a file: secret is one short line; a larger file is refused unread
KEY_LIMIT = 4 * 1024     # a key file, a password on stdin (a Fernet key is 44 bytes)


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


@dataclasses.dataclass(frozen=True)
class Policy:
    """Where references may point.

    ``roots``: the directories a ``file:`` reference must resolve into (symlinks
    resolved); None: anywhere. ``env_names``: the variables an ``env:`` reference
    may name besides those starting :data:`ENV_PREFIX`; None: any (except
    :data:`NEVER_ENV_NAMES`, always refused)."""

    roots: tuple[Path, ...] | None
    env_names: frozenset[str] | None
    secrets_dir: Path | None = None      # the configured one among ``roots`` (named in refusals)

    @classmethod
    def operator(cls) -> "Policy":
        """For a reference the operator gave on the command line: any file, any variable."""
        return cls(None, None)

    @classmethod
    def for_inventory(cls, inventory_dir: Path, *, secrets_dir: Path | str | None = None,
                      environ: Mapping[str, str] | None = None) -> "Policy":
        """An inventory's references: files inside ``inventory_dir`` or ``secrets_dir`` (default
        ``$NODEFORGE_SECRETS_DIR``); variables on the default allow-list plus ``$NODEFORGE_SECRET_ENV_ALLOW``.
        Both come from the operator (options, environment), never from the inventory."""
        environ = os.environ if environ is None else environ
        roots = [Path(os.path.realpath(inventory_dir))]
        configured = None
        if secrets_dir is None and environ.get(SECRETS_DIR_ENV):
            secrets_dir = environ[SECRETS_DIR_ENV]
        if secrets_dir is not None:
            configured = Path(os.path.realpath(Path(secrets_dir).expanduser()))
            if not configured.is_dir():
                raise SecretRefError(detail=f"secrets directory {secrets_dir} (--secrets-dir or "
                                            f"${SECRETS_DIR_ENV}) is not a directory")
            roots.append(configured)
        names = set(DEFAULT_ENV_NAMES)
        for name in (n.strip() for n in environ.get(ENV_ALLOW_ENV, "").split(",")):
            if name and not _ENV_NAME.fullmatch(name):
                raise SecretRefError(detail=f"${ENV_ALLOW_ENV}: {name[:60]!r} is not an environment variable name "
                                            "(a comma-separated list of names)")
            if name:
                names.add(name)
        return cls(tuple(roots), frozenset(names), configured)

    def env_allowed(self, name: str) -> bool:
        if name in NEVER_ENV_NAMES:
            return False
        return self.env_names is None or name.startswith(ENV_PREFIX) or name in self.env_names

    def where(self) -> str:
        """The directories file: may point into, for a refusal."""
        inventory = f"the inventory's directory {self.roots[0]}" if self.roots else "anywhere"
        if self.secrets_dir is not None:
            return f"{inventory} or the secrets directory {self.secrets_dir}"
        return f"{inventory} (another directory: --secrets-dir or ${SECRETS_DIR_ENV})"

    def inside(self, real: Path) -> bool:
        return self.roots is None or any(real == r or real.is_relative_to(r) for r in self.roots)


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def _pseudo_devices() -> set[int]:
    """The devices of /proc and /sys: their files claim to be regular (size 0) and are not."""
    out = set()
    for d in ("/proc", "/sys"):
        try:
            out.add(os.stat(d).st_dev)
        except OSError:
            pass
    return out


def _too_large(what: str, shown, limit: int) -> SecretRefError:
    return SecretRefError(detail=f"{what} {shown} is larger than {limit // 1024} KiB; "
                                 f"a {'secret' if what == 'secret file' else 'key'} is one short line")


def read_bounded(path: Path | str, *, limit: int, what: str, shown=None, nofollow: bool = False,
                 inside: Callable[[Path], bool] | None = None, not_regular_hint: str = "") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them: a FIFO, a device, a
    directory, a /proc or /sys file and a larger file are refused (SecretRefError naming ``what``
    and ``shown``, never the content) before anything is read, and re-checked on the open file.
    Opened non-blocking (a FIFO swapped in never blocks) and, with ``nofollow``, refusing a
    symlink as the last component (the caller resolved them); with ``inside``, the file opened
    must still be where the caller allowed (a directory swapped for a symlink in between)."""
    shown = path if shown is None else shown
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SecretRefError(detail=f"cannot read {what} {shown}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SecretRefError(detail=f"{what} {shown} is {_kind(st.st_mode)}, not a regular file{not_regular_hint}")
    if st.st_dev in _pseudo_devices():
        raise SecretRefError(detail=f"{what} {shown} is a /proc or /sys file, not a regular file")
    if st.st_size > limit:
        raise _too_large(what, shown, limit)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if nofollow else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SecretRefError(detail=f"cannot read {what} {shown}: {exc.strerror}") from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(opened.st_mode):
            raise SecretRefError(detail=f"{what} {shown} changed while it was opened; refused")
        if inside is not None:
            try:
                opened_path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                opened_path = None
            if opened_path is not None and not inside(opened_path):
                raise SecretRefError(detail=f"{what} {shown} moved outside the allowed directories while "
                                            "it was opened; refused")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SecretRefError(detail=f"cannot read {what} {shown}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise _too_large(what, shown, limit)
    return b"".join(chunks)


def read_stream(stream: BinaryIO, *, limit: int = KEY_LIMIT, what: str = "standard input") -> bytes:
    """At most ``limit`` bytes of ``stream`` (standard input): a regular file, a pipe, a socket
    or a terminal; a device (``< /dev/zero``) is refused, and more than ``limit`` bytes (a stream
    that never ends, ``yes |``) is refused after reading ``limit + 1``."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):   # io.UnsupportedOperation is an OSError/ValueError
        fd = None
    if fd is not None:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
            raise SecretRefError(detail=f"{what} is {_kind(mode)}; pipe the value in or redirect a file")
    data = stream.read(limit + 1) or b""
    if len(data) > limit:
        raise SecretRefError(detail=f"{what} holds more than {limit} bytes; a password is one short line")
    return data


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
    # A regular file of at most KEY_LIMIT bytes: a FIFO (or `<(command)`) is refused rather than
    # waited for (a key from another program goes in $NODEFORGE_INVENTORY_KEY), a device too.
    data = read_bounded(path, limit=KEY_LIMIT, what="inventory key file",
                        not_regular_hint=f" (a key from another program: set ${KEY_ENV})").strip()
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
    """Resolves references relative to ``base_dir`` under ``policy`` (default: an inventory's,
    :meth:`Policy.for_inventory` of ``base_dir``, ``secrets_dir`` and ``environ``); caches the key
    and each reference's outcome (a file shared by every node is read once)."""

    def __init__(self, base_dir: Path, *, allow_plaintext: bool = False, key: bytes | None = None,
                 environ: Mapping[str, str] | None = None, policy: Policy | None = None,
                 secrets_dir: Path | str | None = None):
        self.base_dir = Path(base_dir)
        self.allow_plaintext = allow_plaintext
        self._key = key
        self.environ = os.environ if environ is None else environ
        self.policy = policy or Policy.for_inventory(self.base_dir, secrets_dir=secrets_dir, environ=self.environ)
        self._done: dict[str, Secret | SecretRefError] = {}

    def resolve(self, raw: str) -> Secret:
        """The secret a reference points at. Raises SecretRefError (no value in it)."""
        done = self._done.get(raw)
        if done is None:
            try:
                done = self._resolve(raw)
            except SecretRefError as exc:
                done = exc
            self._done[raw] = done
        if isinstance(done, SecretRefError):
            raise done.with_traceback(None)
        return done

    def _resolve(self, raw: str) -> Secret:
        ref = parse_ref(raw)
        if ref.kind == "plain":
            Secret(raw)  # register: it must never print, even in the refusal
            if not self.allow_plaintext:
                raise SecretRefError(detail="plaintext secret refused; use env:VAR, file:PATH or "
                                            "fernet:TOKEN (or --allow-plaintext-secrets)")
            return Secret(raw)
        if ref.kind == "env":
            if not self.policy.env_allowed(ref.target):
                raise SecretRefError(detail=self._env_refusal(ref.target))
            value = self.environ.get(ref.target)
            if not value:
                raise SecretRefError(detail=f"environment variable {ref.target} is not set or empty")
            return Secret(value)
        if ref.kind == "file":
            return Secret(self._read_file(ref.target))
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

    def _env_refusal(self, name: str) -> str:
        if name in NEVER_ENV_NAMES:
            return f"environment variable {name} is nodeforge's own configuration, never a BMC secret"
        allowed = ", ".join(sorted(self.policy.env_names or ()))
        return (f"environment variable {name} is not on the allow-list of secret variables "
                f"({ENV_PREFIX}*, {allowed}); the operator adds names with ${ENV_ALLOW_ENV}")

    def _read_file(self, target: str) -> str:
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = self.base_dir / path
        # The file the reference reaches once every symlink is followed must be inside the policy's
        # directories; it is then opened by that real path, without following a symlink.
        real = Path(os.path.realpath(path))
        if not self.policy.inside(real):
            lexical = Path(os.path.normpath(os.path.abspath(path)))
            via = f" leads through a symlink to {real}, which is" if self.policy.inside(lexical) else " is"
            raise SecretRefError(detail=f"secret file {path}{via} outside {self.policy.where()}")
        data = read_bounded(real, limit=FILE_LIMIT, what="secret file", shown=path, nofollow=True,
                            inside=self.policy.inside)
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretRefError(detail=f"secret file {path} is not UTF-8 text") from None
        value = strip_newline(value)
        if not value:
            raise SecretRefError(detail=f"secret file {path} is empty")
        if "\n" in value or "\r" in value:
            raise SecretRefError(detail=f"secret file {path} has several lines; a secret is one line "
                                        "(only one trailing newline is dropped)")
        return value


def fingerprint(username: str, password: Secret, salt: str) -> str:
    """A credential fingerprint kept on the node (``extra``) to detect rotation.

    Ironic masks passwords on read, so nodeforge cannot compare them; it stores
    this instead. scrypt with a per-node salt (the BMC address) makes it costly
    to brute-force a password from the fingerprint."""
    digest = hashlib.scrypt(f"{username}\0{password.reveal()}".encode(), salt=f"nodeforge:{salt}".encode(),
                            n=2 ** 12, r=8, p=1, dklen=16)
    return "scrypt1:" + digest.hex()
