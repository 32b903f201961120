"""API keys for the OpenAI ingress: random secrets, only their SHA-256 at rest, hot reload.

Keys
    ``sk-llmfleet-`` + ``secrets.token_urlsafe(32)`` (256 random bits). The key file holds
    only ``sha256(key)`` as hex. A fast unsalted hash is enough here, unlike for passwords:
    with 256 bits of entropy there is nothing to guess or precompute, so a stolen file gives
    no way back to a key, and a fast hash keeps ``lookup`` cheap on every request. The
    plaintext is printed once by ``llmfleet keys add`` and never written anywhere.
Lookup
    The presented key's digest is compared with *every* stored digest through
    ``hmac.compare_digest``, with no early exit on a match, so timing says nothing about
    which key matched or how much of a digest agreed.
Key file (YAML, mode 0600, rewritten atomically: temp file in the same dir + os.replace)::

    keys:
      - name: alice                  # unique; [A-Za-z0-9._@-], at most 64 chars
        sha256: 3f1c…(64 hex)
        admin: false
        created: '2025-01-01T00:00:00+00:00'
        limits: {requests_per_min: 60, tokens_per_min: 100000, max_streams: 4}

    Each limit optional, null = unlimited. Unknown fields are errors, and a field named
    ``key`` anywhere is refused: keys are never stored in clear. The env var
    LLMFLEET_API_KEYS may hold the same YAML; both sources merge (a name in both: error).
KeyStore contract
    - Construction fails (KeyFileError) on a missing or invalid file or env text.
    - ``configured()`` is True once a file path or env text is given, even with no keys in
      it: auth is on and every request gets 401. Misconfiguration fails closed, never open.
    - ``lookup()`` reloads at most every ``reload_period_s`` (injected clock): it stats the
      file and re-reads it when mtime_ns, size or inode changed. An invalid or vanished
      file keeps the previous keys and logs a warning.
    - Not locked against two concurrent ``keys add`` runs (the last writer wins).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import logging
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

KEY_PREFIX = "sk-llmfleet-"
ENV_VAR = "LLMFLEET_API_KEYS"
_NAME_RE = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_HEX_RE = re.compile(r"[0-9a-f]{64}")
_ENTRY_FIELDS = frozenset({"name", "sha256", "admin", "created", "limits"})


class KeyFileError(ValueError):
    """A key file or env text that cannot be used; the message names the source and entry."""


@dataclass(frozen=True, slots=True)
class KeyLimits:
    requests_per_min: int | None = None
    tokens_per_min: int | None = None
    max_streams: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"{f.name} must be a positive integer or null, got {value!r}")


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    admin: bool
    limits: KeyLimits
    key_id: str  # first 12 hex of the digest, for logs and metrics; never the key
    created: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class _Entry:
    sha256: str
    key: ApiKey


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def bearer_token(authorization_header: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (scheme case-insensitive), else None."""
    if not authorization_header:
        return None
    scheme, _, token = authorization_header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        return None
    return token


# ---- parsing ----------------------------------------------------------------------------
def _refuse_plaintext(node: Any, where: str) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if str(k).lower() == "key":
                raise KeyFileError(
                    f"{where}: field 'key' looks like a plaintext key; keys are never stored "
                    "in clear: store its sha256 (`llmfleet keys add` does this)"
                )
            _refuse_plaintext(v, where)
    elif isinstance(node, list):
        for v in node:
            _refuse_plaintext(v, where)


def _limits(raw: Any, where: str) -> KeyLimits:
    if raw is None:
        return KeyLimits()
    if not isinstance(raw, dict):
        raise KeyFileError(f"{where}: limits must be a mapping")
    unknown = set(raw) - {f.name for f in fields(KeyLimits)}
    if unknown:
        raise KeyFileError(f"{where}: unknown limits {sorted(map(str, unknown))}")
    try:
        return KeyLimits(**raw)
    except ValueError as err:
        raise KeyFileError(f"{where}: {err}") from None


def _entry(raw: Any, where: str) -> _Entry:
    if not isinstance(raw, dict):
        raise KeyFileError(f"{where}: each key must be a mapping")
    unknown = set(raw) - _ENTRY_FIELDS
    if unknown:
        raise KeyFileError(f"{where}: unknown fields {sorted(map(str, unknown))}")
    name, sha, admin = raw.get("name"), raw.get("sha256"), raw.get("admin", False)
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise KeyFileError(f"{where}: name must match {_NAME_RE.pattern}, got {name!r}")
    where = f"{where} ({name})"
    if not isinstance(sha, str) or not _HEX_RE.fullmatch(sha):
        raise KeyFileError(f"{where}: sha256 must be 64 lowercase hex digits")
    if not isinstance(admin, bool):
        raise KeyFileError(f"{where}: admin must be true or false")
    created = raw.get("created") or ""
    if isinstance(created, dt.datetime | dt.date):  # an unquoted timestamp in a hand edit
        created = created.isoformat()
    limits = _limits(raw.get("limits"), where)
    return _Entry(sha, ApiKey(name, admin, limits, sha[:12], str(created)))


def _parse_keys(text: str, source: str) -> list[_Entry]:
    """Entries of one source (file or env text); KeyFileError naming ``source`` if invalid."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise KeyFileError(f"{source}: not valid YAML: {err}") from None
    if doc is None:
        return []
    _refuse_plaintext(doc, source)
    if not isinstance(doc, dict) or set(doc) - {"keys"}:
        raise KeyFileError(f"{source}: top level must be a mapping with only 'keys'")
    raw = doc.get("keys") or []
    if not isinstance(raw, list):
        raise KeyFileError(f"{source}: 'keys' must be a list")
    return _merge([[_entry(item, f"{source}: keys[{i}]") for i, item in enumerate(raw)]])


def _merge(sources: Iterable[list[_Entry]]) -> list[_Entry]:
    out: list[_Entry] = []
    seen: set[str] = set()  # names and digests (they cannot collide: a digest is 64 hex)
    for e in (e for entries in sources for e in entries):
        if e.key.name in seen:
            raise KeyFileError(f"key name {e.key.name!r} appears twice")
        if e.sha256 in seen:
            raise KeyFileError(f"key {e.key.name!r} has the same sha256 as another key")
        seen.update((e.key.name, e.sha256))
        out.append(e)
    return out


def _read(path: Path) -> tuple[tuple[int, int, int], str]:
    """Signature (mtime_ns, size, inode) of the file actually read, and its text."""
    with open(path, encoding="utf-8") as f:
        st = os.fstat(f.fileno())
        return (st.st_mtime_ns, st.st_size, st.st_ino), f.read()


# ---- the store the ingress uses ---------------------------------------------------------
class KeyStore:
    def __init__(
        self,
        path: str | Path | None,
        env_text: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        reload_period_s: float = 1.0,
    ) -> None:
        self._path = Path(path).expanduser() if path is not None else None
        self._env = _parse_keys(env_text, ENV_VAR) if env_text is not None else []
        self._configured = path is not None or env_text is not None
        self._clock = clock
        self._period = reload_period_s
        self._sig: tuple[int, int, int] | None = None
        self._entries: tuple[_Entry, ...] = tuple(self._env)
        if self._path is not None:
            try:
                self._sig, text = _read(self._path)
            except OSError as err:
                raise KeyFileError(f"key file {self._path}: {err.strerror or err}") from None
            self._entries = self._with_env(text)
        self._next_check = clock() + reload_period_s

    @classmethod
    def from_config(cls, path: str | Path | None, **kwargs: Any) -> KeyStore:
        return cls(path, os.environ.get(ENV_VAR), **kwargs)

    def _with_env(self, file_text: str) -> tuple[_Entry, ...]:
        entries = _parse_keys(file_text, f"key file {self._path}")
        try:
            return tuple(_merge([self._env, entries]))
        except KeyFileError as err:
            raise KeyFileError(f"{ENV_VAR} and key file {self._path}: {err}") from None

    def configured(self) -> bool:
        return self._configured or bool(self._entries)

    def keys(self) -> list[ApiKey]:
        return [e.key for e in self._entries]

    def lookup(self, presented: str | None) -> ApiKey | None:
        self._maybe_reload()
        if not presented:
            return None
        wanted = digest(presented).encode()
        found: ApiKey | None = None
        for e in self._entries:  # every digest compared, no early exit
            match = hmac.compare_digest(e.sha256.encode(), wanted)
            if match:
                found = e.key
        return found

    def _maybe_reload(self) -> None:
        if self._path is None:
            return
        now = self._clock()
        if now < self._next_check:
            return
        self._next_check = now + self._period
        try:
            st = os.stat(self._path)
            if (st.st_mtime_ns, st.st_size, st.st_ino) == self._sig:
                return
            sig, text = _read(self._path)
        except OSError as err:
            if self._sig is not None:
                log.warning("key file %s unreadable (%s); keeping previous keys", self._path, err)
            self._sig = None  # warn once; re-read when it comes back
            return
        self._sig = sig  # an invalid version is reported once, not every period
        try:
            self._entries = self._with_env(text)
        except KeyFileError as err:
            log.warning("%s; keeping previous keys", err)
            return
        log.info("key file %s reloaded: %d keys", self._path, len(self._entries))


# ---- the file, for the CLI --------------------------------------------------------------
def _load_file(path: Path) -> list[_Entry]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise KeyFileError(f"key file {path}: {err.strerror or err}") from None
    return _parse_keys(text, f"key file {path}")


def _as_dict(e: _Entry) -> dict[str, Any]:
    k, limits = e.key, {f.name: getattr(e.key.limits, f.name) for f in fields(KeyLimits)}
    return dict(name=k.name, sha256=e.sha256, admin=k.admin, created=k.created, limits=limits)


def _write_file(path: Path, entries: list[_Entry]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = yaml.safe_dump(
        {"keys": [_as_dict(e) for e in entries]}, sort_keys=False, default_flow_style=None
    )
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def add_key(
    path: str | Path,
    name: str,
    *,
    admin: bool = False,
    limits: KeyLimits = KeyLimits(),  # frozen: one shared default is safe
    replace: bool = False,
) -> str:
    """Add (or with ``replace`` rotate) ``name``; creates the file. Returns the key, once."""
    if not _NAME_RE.fullmatch(name):
        raise KeyFileError(f"key name must match {_NAME_RE.pattern}, got {name!r}")
    path = Path(path).expanduser()
    entries = _load_file(path) if path.exists() else []
    key = new_key()
    sha = digest(key)
    created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    new = _Entry(sha, ApiKey(name, admin, limits, sha[:12], created))
    at = next((i for i, e in enumerate(entries) if e.key.name == name), None)
    if at is None:
        entries.append(new)
    elif replace:
        entries[at] = new
    else:
        raise KeyFileError(f"key {name!r} already exists in {path}; use --replace to rotate it")
    _write_file(path, entries)
    return key


def remove_key(path: str | Path, name: str) -> bool:
    path = Path(path).expanduser()
    if not path.exists():
        return False
    entries = _load_file(path)
    kept = [e for e in entries if e.key.name != name]
    if len(kept) == len(entries):
        return False
    _write_file(path, kept)
    return True


def list_keys(path: str | Path) -> list[ApiKey]:
    return [e.key for e in _load_file(Path(path).expanduser())]
