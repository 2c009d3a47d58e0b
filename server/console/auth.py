"""Who is signed in to the console. Credentials are scrypt hashes from CONSOLE_USERS
(`router-backend console credential` makes them). A session lives on the server (table
`console_sessions`): the cookie holds only an opaque random id (nothing readable), stored as
its HMAC under CONSOLE_SECRET; the row holds the name, a fingerprint of the credential it
was made with (so a changed credential ends it), the CSRF token every form must send back,
where it signed in from, and when it expires. Signing out deletes the row, and so does
`router-backend console sessions end NAME`; a person removed from CONSOLE_USERS has no
session any more. Every process reads the row at each request, so an ended session is
refused at once everywhere."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from aiohttp import web

from server.console import session_sql as sessions_db
from server.db.pool import Database
from server.settings import Settings

MIN_SECRET = 16
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1   # 16 MiB and some 50 ms a check
COOKIE = "console_session"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


def hash_secret(secret: str) -> str:
    """The form CONSOLE_USERS takes: scrypt$N$R$P$SALT$DIGEST."""
    if len(secret) < MIN_SECRET:
        raise ValueError(f"a console secret has at least {MIN_SECRET} characters")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                            dklen=32)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def secret_matches(secret: str, encoded: str) -> bool:
    _, n, r, p, salt, digest = encoded.split("$")
    candidate = hashlib.scrypt(secret.encode()[:1024], salt=base64.urlsafe_b64decode(salt),
                               n=int(n), r=int(r), p=int(p), dklen=32)
    return hmac.compare_digest(candidate, base64.urlsafe_b64decode(digest))


@dataclass(frozen=True)
class User:
    name: str
    role: str
    csrf: str

    @property
    def may_change(self) -> bool:
        return self.role == "operator"


class Sessions:
    def __init__(self, settings: Settings):
        self._users = {name: (role, digest) for name, role, digest in settings.console_users}
        self._key = (settings.console_secret or "unused").encode()
        self._lifetime = timedelta(minutes=settings.console_session_minutes)
        self.max_age = settings.console_session_minutes * 60

    @property
    def anyone(self) -> bool:
        """Whether anybody can sign in at all."""
        return bool(self._users)

    def credential_of(self, name: str) -> str | None:
        entry = self._users.get(name)
        return None if entry is None else entry[1]

    async def start(self, db: Database, name: str, address: str) -> str:
        """A new session of `name` (whose secret was just checked), with a new CSRF token;
        returns the cookie's value."""
        session_id = secrets.token_urlsafe(32)
        await sessions_db.start(db, self._id_hash(session_id), name,
                                _fingerprint(self._users[name][1]), secrets.token_urlsafe(24),
                                address, self._lifetime)
        return session_id

    async def user_of(self, db: Database, cookie: str | None) -> User | None:
        """The signed-in user, or None (no cookie, an unknown, ended or expired session, a user
        gone or whose credential changed since)."""
        if not cookie or len(cookie) > 100:
            return None
        found = await sessions_db.find(db, self._id_hash(cookie))
        if found is None:
            return None
        name, fingerprint, csrf = found
        entry = self._users.get(name)
        if entry is None or not hmac.compare_digest(fingerprint, _fingerprint(entry[1])):
            return None
        return User(name, entry[0], csrf)

    async def end(self, db: Database, cookie: str | None) -> None:
        if cookie and len(cookie) <= 100:
            await sessions_db.end(db, self._id_hash(cookie))

    def _id_hash(self, session_id: str) -> bytes:
        return hmac.new(self._key, session_id.encode(), hashlib.sha256).digest()


SESSIONS = web.AppKey("console_sessions", Sessions)
USER = web.RequestKey("console_user", User)   # absent or None: nobody signed in


def cookie_secure(request: web.Request, client: str) -> bool:
    """Whether the browser reached us over TLS: directly, or through a trusted proxy (one whose
    X-Forwarded-For named `client`) that says so in X-Forwarded-Proto."""
    return request.secure or (client != request.remote
                              and request.headers.get("X-Forwarded-Proto") == "https")


def _fingerprint(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()[:16]


def csrf_matches(user: User, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(user.csrf.encode(), sent.encode())
