"""The router's key (ROUTER_AUTH=key): read from key_file, or got once from POST /enroll with
the fleet's enrollment token and kept there (mode 0600). Without a token and a key file the
agent sends no key (ROUTER_AUTH=mac)."""

from __future__ import annotations

import logging

from agent.client import ServiceClient
from agent.config import AgentConfig
from agent.files import write_atomically

log = logging.getLogger("router_agent.enrollment")


def router_key(config: AgentConfig, client: ServiceClient) -> str | None:
    """The key to send; enrolls first when there is a token and no key yet. Refused (409)
    when the router has a key already that this agent does not hold: an operator's
    `router-backend subscriptions reset MAC` lets it enroll again."""
    path = config.key_path
    if path.exists():
        return path.read_text().strip() or None
    if not config.enrollment_token:
        return None
    answer = client.request("POST", "/enroll", b"", bearer=config.enrollment_token)
    key = answer.json()["key"]
    write_atomically(path, key.encode() + b"\n", 0o600)
    log.info("enrolled: the router's key is in %s", path)
    return key
