"""The threat intelligence document (GET /rules/intel, docs/router-api.md) installed on the
router: its dataset files and rules file written into `intel_dir` (beside the IDS rules by
default; Suricata opens a relative dataset path beside the rules file naming it), checked
with the test command and loaded with the reload command, as the IDS payload is ({rules_file}
naming rb-intel.rules); its block entries written as an nftables file of interval sets
(router_backend_intel_v4/v6) and loaded with the firewall commands, only what changed when
the sets can be read (as the block lists are: agent/nftsets.py). When a check or a reload
fails, every file written is put back as it was and loaded again.

The last document applied is kept in the state directory, so the next fetch asks only for
what changed since (`?delta=2`, If-None-Match its ETag) and applies that to it. What the
server sends is checked before it reaches a file: known file names only, one value a line
without spaces or quotes, each rule one line, each block entry a network.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
from pathlib import Path

from agent.client import ServiceClient
from agent.config import AgentConfig
from agent.deltas import follows, removals, serial_of
from agent.enforcement import EnforcementReporter
from agent.files import write_atomically
from agent.nftsets import changes_file, element, read_sets, whole_file
from agent.state import AgentState, now

log = logging.getLogger("router_agent.intel")

RULES_FILE = "rb-intel.rules"
NFT_FILE = "rb-intel-block.nft"
DOCUMENT_FILE = "intel.json"
FILE_NAME = re.compile(r"rb-intel-[a-z0-9]+\.(lst|txt)")
VALUE = re.compile(r"[A-Za-z0-9+/=.:_-]{1,400}")


class IntelError(Exception):
    """The document cannot be applied; the previous files stay in force."""


def applied(document: dict, delta: dict) -> dict:
    """The document a delta leads to from `document`."""
    files = {name: set(text.splitlines()) for name, text in document["files"].items()}
    for name, change in delta["files"].items():
        lines = files.setdefault(name, set())
        lines.difference_update(removals(list(lines), change))
        lines.update(change["add"])
    gone = removals([entry["address"] for entry in document["block"]], delta["block"])
    block = [entry for entry in document["block"] if entry["address"] not in gone]
    block += delta["block"]["add"]
    return {"entry_count": delta["entry_count"], "rules": delta["rules"],
            "files": {name: "".join(f"{line}\n" for line in sorted(lines))
                      for name, lines in files.items() if lines},
            "block": block}


def checked(document: dict) -> dict:
    for name, text in document["files"].items():
        if not FILE_NAME.fullmatch(name):
            raise IntelError(f"not a file of ours: {name[:80]!r}")
        for line in text.splitlines():
            if not VALUE.fullmatch(line):
                raise IntelError(f"{name}: not a value: {line[:80]!r}")
    rules = document["rules"]
    if not isinstance(rules, str) or "\r" in rules:
        raise IntelError("the rules are not text lines")
    for entry in document["block"]:
        try:
            ipaddress.ip_network(entry["address"])
        except (ValueError, TypeError, KeyError):
            raise IntelError(f"not a network: {str(entry)[:80]!r}") from None
    return document


def block_sets(document: dict, config: AgentConfig) -> dict[str, list[str]]:
    """Each intel set's elements (IPv4, IPv6), as a set lists them."""
    sets = {4: config.nft_set_intel_v4, 6: config.nft_set_intel_v6}
    families: dict[str, set[str]] = {sets[4]: set(), sets[6]: set()}
    for entry in document["block"]:
        network = ipaddress.ip_network(entry["address"])
        families[sets[network.version]].add(element(str(network)))
    return {name: sorted(elements) for name, elements in families.items()}


def _empty(document: dict) -> bool:
    return not document["files"] and not document["block"]


class IntelUpdater:
    def __init__(self, config: AgentConfig, state: AgentState, client: ServiceClient,
                 run, run_quietly, enforcement: EnforcementReporter):
        """`run(command, what)` and `run_quietly(command)`: agent/rules.py's; `enforcement`
        is given what the block sets dropped before they change."""
        self._config = config
        self._state = state
        self._client = client
        self._run, self._run_quietly = run, run_quietly
        self._enforcement = enforcement
        self._kept = config.state_dir / DOCUMENT_FILE

    def update(self, etag: str) -> tuple[bool, str] | None:
        """Fetch and apply when the document's ETag moved; None when nothing changed."""
        done = self._state.values["applied"].get("intel", {})
        failed = self._state.values["failed"].get("intel")
        if done.get("etag") == etag and self._kept.exists() or failed == etag:
            return None
        headers = {"Accept-Encoding": "gzip"}
        held = json.loads(self._kept.read_text()) if self._kept.exists() else None
        if held is not None and done.get("etag"):
            headers["If-None-Match"] = done["etag"]
        answer = self._client.request("GET", "/rules/intel?delta=2", headers=headers)
        if answer.status == 304:
            return None
        new_etag, body = answer.headers.get("etag", ""), None
        headers.pop("If-None-Match", None)  # what is asked again is the whole document
        try:
            body = answer.json()
            if "delta_from" in body and not follows(body, done):
                log.warning("intel delta from version %s, this router holds %s: the whole "
                            "document asked", body.get("from_serial"), done.get("serial"))
                answer = self._client.request("GET", "/rules/intel", headers=headers)
                new_etag, body = answer.headers.get("etag", ""), answer.json()
            document = self._applied(held, body)
        except (IntelError, KeyError, TypeError, AttributeError, ValueError) as error:
            if not isinstance(body, dict) or "delta_from" not in body:
                return self._failed(new_etag, error)
            # A delta that does not apply: the whole document, before this version is
            # marked failed (and not asked again until it changes).
            log.warning("intel delta to %s not applied (%s): the whole document asked",
                        new_etag, error)
            try:
                answer = self._client.request("GET", "/rules/intel", headers=headers)
                new_etag, body = answer.headers.get("etag", ""), answer.json()
                document = self._applied(held, body)
            except (IntelError, KeyError, TypeError, AttributeError, ValueError) as error:
                return self._failed(new_etag, error)
        write_atomically(self._kept, json.dumps(document).encode(), 0o600)
        self._state.values["applied"]["intel"] = {"etag": new_etag, "at": now(),
                                                  "entries": document["entry_count"],
                                                  "delta": "delta_from" in body,
                                                  "serial": serial_of(answer, body)}
        self._state.values["failed"].pop("intel", None)
        log.info("intel document %s applied: %d entries", new_etag, document["entry_count"])
        return True, ""

    def _applied(self, held: dict | None, body: dict) -> dict:
        """The document `body` (whole, or a delta to `held`) leads to, installed."""
        document = checked(applied(held, body) if "delta_from" in body else body)
        if not _empty(document) or (held is not None and not _empty(held)):
            self._install(document)  # (an empty list where none was: nothing to load)
        return document

    def _failed(self, etag: str, error: Exception) -> tuple[bool, str]:
        log.error("intel document %s not applied: %s", etag, error)
        self._state.values["failed"]["intel"] = etag
        self._state.error(f"intel document not applied: {error}")
        return False, f"intel: {error}"

    def _install(self, document: dict) -> None:
        directory = self._config.intel_path
        rules = directory / RULES_FILE
        wanted = {**{directory / name: text.encode() for name, text in
                     document["files"].items()}, rules: document["rules"].encode()}
        stale = [path for path in directory.glob("rb-intel-*") if FILE_NAME.fullmatch(
            path.name) and path not in wanted]
        self._replace(wanted, stale, ("test_command", "reload_command"), rules_file=rules)
        self._install_sets(document)

    def _install_sets(self, document: dict) -> None:
        """The block entries into the intel sets: only what changed when they can be read
        (agent/nftsets.py), from the reading that counts what they dropped, so an element
        kept keeps its counter; else the sets filled whole. The whole file is written either
        way, for the router's boot."""
        table, nft = self._config.nft_table, self._config.firewall_file.with_name(NFT_FILE)
        wanted = block_sets(document, self._config)
        held = read_sets(self._config, wanted)
        loaded = nft
        if held is None:
            self._enforcement.take()
        else:
            self._enforcement.counted("intel", list(held.values()))
            loaded = nft.with_name(NFT_FILE + ".changes")
            write_atomically(loaded, changes_file(table, wanted, held, "threat intelligence"))
        self._replace({nft: whole_file(table, wanted, "threat intelligence")}, [],
                      ("firewall_test_command", "firewall_reload_command"),
                      restore=loaded == nft, firewall_file=loaded)

    def _replace(self, wanted: dict[Path, bytes], stale: list[Path], commands: tuple,
                 restore: bool = True, **files: Path) -> None:
        """Write `wanted`, remove `stale`, test and reload; on a failure the files put back
        and, when `restore`, loaded again (a file of changes that failed changed nothing)."""
        before = {path: path.read_bytes() if path.exists() else None
                  for path in [*wanted, *stale]}
        for path, content in wanted.items():
            write_atomically(path, content)
        for path in stale:
            path.unlink(missing_ok=True)
        test, reload = (self._config.command(name, **files) for name in commands)
        try:
            self._run(test, "test")
            self._run(reload, "reload")
        except Exception:
            for path, content in before.items():
                if content is None:
                    path.unlink(missing_ok=True)
                else:
                    write_atomically(path, content)
            if restore:
                self._run_quietly(reload)
            raise
