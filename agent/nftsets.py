"""The router's nftables block-list sets: what they hold and what each element dropped
(read with counters_command, `nft -j list set`), and the files that fill them.

A set is filled whole (`flush set` and `add element` in one file: `nft -f` applies a file in
one transaction, so the set is never seen empty) when the agent cannot read it; otherwise
only what changed is applied (`delete element` and `add element`, one transaction too), so
every element kept keeps its counter and nothing is reloaded that did not change. The whole
file is still written, for the router's boot to load."""

from __future__ import annotations

import ipaddress
import json
import logging
import subprocess

from agent.config import AgentConfig

log = logging.getLogger("router_agent.nftsets")

COMMAND_TIMEOUT_SECONDS = 60
Counts = tuple[int, int] | None  # an element's packets and bytes; None: no counter


def element(text: str) -> str:
    """An address or a network as a set holds and lists it: a host alone, a network as
    CIDR (ValueError when it is neither)."""
    network = ipaddress.ip_network(text)
    if network.prefixlen == network.max_prefixlen:
        return str(network.network_address)
    return str(network)


def listed(listing: dict) -> dict[str, Counts]:
    """A set's elements and their counters, from `nft -j list set`."""
    held: dict[str, Counts] = {}
    for item in listing.get("nftables", []):
        for entry in (item.get("set") or {}).get("elem", []):
            inner = entry.get("elem") if isinstance(entry, dict) else None
            value = inner.get("val") if isinstance(inner, dict) else entry
            if isinstance(value, dict) and isinstance(value.get("prefix"), dict):
                value = f"{value['prefix']['addr']}/{value['prefix']['len']}"
            if not isinstance(value, str):
                continue  # a range: nothing the service sends
            counter = inner.get("counter") if isinstance(inner, dict) else None
            held[element(value)] = ((int(counter.get("packets", 0)),
                                     int(counter.get("bytes", 0)))
                                    if isinstance(counter, dict) else None)
    return held


def read_set(config: AgentConfig, set_name: str) -> dict[str, Counts] | None:
    """What one set holds now; None when it cannot be read (no nft, no such set)."""
    command: list[str] = []
    for part in config.counters_command:
        command += [*config.nft_table.split(), set_name] if part == "{set}" else [part]
    if not command:
        return None
    try:
        done = subprocess.run(command, capture_output=True, timeout=COMMAND_TIMEOUT_SECONDS)
        if done.returncode != 0:
            raise OSError(done.stderr.decode("utf-8", "replace").strip()[-200:])
        return listed(json.loads(done.stdout))
    except (OSError, subprocess.TimeoutExpired, ValueError, TypeError, KeyError) as error:
        log.warning("set %s not read: %s", set_name, error)
        return None


def read_sets(config: AgentConfig, names) -> dict[str, dict[str, Counts]] | None:
    """Each named set's elements; None when one cannot be read."""
    held = {}
    for name in names:
        found = read_set(config, name)
        if found is None:
            return None
        held[name] = found
    return held


def whole_file(table: str, wanted: dict[str, list[str]], title: str) -> bytes:
    """Each set of `wanted` (its name: its elements) flushed and filled."""
    lines = [f"# router-backend {title}: {sum(map(len, wanted.values()))} entries"]
    for name, elements in wanted.items():
        lines.append(f"flush set {table} {name}")
        if elements:
            lines.append(f"add element {table} {name} {{ {', '.join(elements)} }}")
    return ("\n".join(lines) + "\n").encode()


def changes_file(table: str, wanted: dict[str, list[str]],
                 held: dict[str, dict[str, Counts]], title: str) -> bytes:
    """What turns the sets `held` into `wanted`: its removed elements deleted, its new ones
    added."""
    lines = [f"# router-backend {title}: changes"]
    for name, elements in wanted.items():
        removed = sorted(set(held[name]) - set(elements))
        added = [value for value in elements if value not in held[name]]
        if removed:
            lines.append(f"delete element {table} {name} {{ {', '.join(removed)} }}")
        if added:
            lines.append(f"add element {table} {name} {{ {', '.join(added)} }}")
    return ("\n".join(lines) + "\n").encode()
