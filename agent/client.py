"""HTTP to the service (urllib): what an answer means for the agent, and how long to wait
before trying again.

- 2xx and 304 are answers.
- Unavailable: the network, a timeout, 408, 429, 503 and other 5xx. Worth trying again,
  after the server's Retry-After when it sent one, else after an exponential backoff with
  full jitter (a random wait between 0 and min(retry_max_seconds, 2^attempt s)), so a fleet
  that lost the server together does not come back together.
- Refused: any other 4xx. The same request can never succeed (a bad batch, a key the server
  does not know, a router not subscribed); the agent logs it and does not repeat it.
"""

from __future__ import annotations

import gzip
import http.client
import json
import random
import urllib.error
import urllib.request
from dataclasses import dataclass

from agent.config import AgentConfig

RETRYABLE = {408, 425, 429}


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        """The answer's JSON object. Anything else (a captive portal's page, a proxy's
        error) is Unavailable: not the service, try again later."""
        try:
            value = json.loads(self.body)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise Unavailable(f"answer {self.status} is not a JSON object: "
                              f"{self.body[:80]!r}")
        return value


class Unavailable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


class Refused(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(f"{status}: {reason}")
        self.status = status


class ServiceClient:
    def __init__(self, config: AgentConfig, key: str | None = None):
        self._base = config.server_url.rstrip("/")
        self._mac = config.mac
        self._timeout = config.timeout_seconds
        self._capacity = config.capacity_header
        self.key = key

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None,
                bearer: str | None = None) -> Answer:
        sent = {"X-ID": self._mac, "User-Agent": "router-agent",
                "Router-Capacity": self._capacity, **(headers or {})}
        if bearer or self.key:
            sent["Authorization"] = f"Bearer {bearer or self.key}"
        request = urllib.request.Request(self._base + path, data=body, method=method,
                                         headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                return _answer(response.status, response.headers, response.read())
        except urllib.error.HTTPError as error:
            with error:
                answer = _answer(error.code, error.headers, error.read())
            if error.code == 304:
                return answer
            raise _failure(answer) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            raise Unavailable(f"{method} {path}: {getattr(error, 'reason', error)}") from None


def _answer(status: int, headers, body: bytes) -> Answer:
    if headers.get("Content-Encoding", "").lower() == "gzip":
        body = gzip.decompress(body)
    return Answer(status, {name.lower(): value for name, value in headers.items()}, body)


def _failure(answer: Answer) -> Exception:
    try:
        reason = str(answer.json().get("error", ""))
    except Unavailable:
        reason = answer.body[:200].decode("utf-8", "replace")
    if answer.status in RETRYABLE or answer.status >= 500:
        return Unavailable(f"{answer.status}: {reason}", _seconds(answer.headers))
    return Refused(answer.status, reason)


def _seconds(headers: dict[str, str]) -> float | None:
    try:
        return max(0.0, float(headers["retry-after"]))
    except (KeyError, ValueError):
        return None  # (an HTTP date is taken as absent: the backoff decides)


class Backoff:
    """Waits after consecutive failures: Retry-After when given, else full jitter."""

    def __init__(self, cap_seconds: float, base_seconds: float = 1.0):
        self._cap = cap_seconds
        self._base = base_seconds
        self.failures = 0

    def failed(self, retry_after: float | None = None) -> float:
        self.failures += 1
        if retry_after is not None:
            return min(self._cap, retry_after) + random.uniform(0, 1)
        return random.uniform(0, min(self._cap, self._base * 2 ** self.failures))

    def succeeded(self) -> None:
        self.failures = 0
