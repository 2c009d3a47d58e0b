"""What a capability raises when it refuses a request, in its own words: a message, when
trying again may succeed, and more fields to answer with. No status: the web layer's table
(server/handlers/domain_errors.py) says how each is answered."""

from __future__ import annotations


class Refusal(Exception):
    def __init__(self, message: str, retry_after_seconds: int | None = None,
                 details: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_seconds = retry_after_seconds
        self.details = details  # more fields of the answer, beside the message
