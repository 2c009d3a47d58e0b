"""The router's IDS rules and firewall block list, kept up to date and never lost.

Each poll asks GET /rules/last_updated; a kind whose time moved (for the fleet's shared list,
whose ETag moved) is fetched with If-None-Match (the ETag applied, and one that failed to
load, so a payload that failed is not tried again until it changes); the fleet's list as
what changed since the list held (`?delta=2`, the list kept in the state directory), whole
when the delta does not follow. A new payload is written atomically over the file (the
file it replaces kept as FILE.prev), checked with the test command and loaded with the reload
command; when either fails the previous file is put back and loaded again. The outcome goes
to POST /rules/applied. Nothing here runs while the server is unreachable: the files last
applied stay in force.

What the server sends is checked before it reaches a file: every IDS rule is one line,
every firewall address a real IPv4 or IPv6 address, so no payload can smuggle in other
nftables commands.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import subprocess

from agent.client import ServiceClient
from agent.config import AgentConfig
from agent.deltas import fleet_applied, follows, serial_of
from agent.enforcement import EnforcementReporter
from agent.files import write_atomically
from agent.intel import IntelUpdater
from agent.nftsets import changes_file, read_sets, whole_file
from agent.state import AgentState, now

log = logging.getLogger("router_agent.rules")

COMMAND_TIMEOUT_SECONDS = 300
MAX_DETAIL = 1000  # the service's limit on a report's detail
FLEET_DOCUMENT_FILE = "fleet.json"  # the fleet's list last applied, for the next delta


class PayloadError(Exception):
    """The payload cannot be written as a file (a rule of two lines, an address that is
    not one)."""


class InstallError(Exception):
    """The test or the reload command failed; the previous file is back."""


# What a payload that cannot be applied raises (a bad document, a refused reload).
NOT_APPLIED = (PayloadError, InstallError, KeyError, TypeError, AttributeError, ValueError)


class RuleUpdater:
    def __init__(self, config: AgentConfig, state: AgentState, client: ServiceClient,
                 enforcement: EnforcementReporter):
        self._config = config
        self._enforcement = enforcement
        self._state = state
        self._client = client
        self._files = {"ids": config.rules_file, "firewall": config.firewall_file,
                       "fleet": config.fleet_path}
        self._fleet_kept = config.state_dir / FLEET_DOCUMENT_FILE
        self._intel = IntelUpdater(config, state, client, _run, _run_quietly, enforcement)
        self._commands = {"ids": ("test_command", "reload_command"),
                          "firewall": ("firewall_test_command", "firewall_reload_command"),
                          "fleet": ("firewall_test_command", "firewall_reload_command")}

    def poll(self) -> bool | None:
        """One poll: None when nothing changed, else whether every new payload loaded."""
        updated = self._client.request("GET", "/rules/last_updated").json()
        if self._config.fleet_list:  # the fleet's document moves with its ETag
            updated["fleet_updated_at"] = updated.get("fleet_etag")
        outcomes = []
        for kind in ("ids", "firewall", "fleet"):
            updated_at = updated.get(f"{kind}_updated_at")
            applied = self._state.values["applied"].get(kind, {})
            if updated_at is None or (applied.get("updated_at") == updated_at
                                      and self._files[kind].exists()):
                continue
            outcome = self._update(kind, updated_at)
            if outcome is not None:
                outcomes.append(outcome)
        if self._config.intel and updated.get("intel_etag"):
            try:
                outcome = self._intel.update(updated["intel_etag"])
            except InstallError as error:  # its files were put back
                self._state.values["failed"]["intel"] = updated["intel_etag"]
                outcome = (False, f"intel: {error}")
            if outcome is not None:
                outcomes.append(outcome)
        if not outcomes:
            self._state.save()
            return None
        ok = all(success for success, _ in outcomes)
        detail = "; ".join(text for _, text in outcomes if text) or None
        self._report(ok, detail)
        return ok

    def _update(self, kind: str, updated_at: str) -> tuple[bool, str] | None:
        applied = self._state.values["applied"].get(kind, {})
        failed = self._state.values["failed"].get(kind)
        known = [etag for etag in (applied.get("etag") if self._files[kind].exists() else None,
                                   failed) if etag]
        headers = {"Accept-Encoding": "gzip"}
        if known:
            headers["If-None-Match"] = ", ".join(known)
        held = self._held_fleet(applied.get("etag")) if kind == "fleet" and known else None
        path = f"/rules/{kind}" + ("?delta=2" if held is not None else "")
        answer = self._client.request("GET", path, headers=headers)
        if answer.status == 304 and answer.headers.get("etag") == applied.get("etag"):
            # The time moved, yet the ETag is said to be current: a 304 from the service's
            # ETag cache can be stale (agent drills in CI saw one pin an agent to its old
            # payload). Asked without If-None-Match, the service reads its database.
            answer = self._client.request("GET", f"/rules/{kind}",
                                          headers={"Accept-Encoding": "gzip"})
            if answer.headers.get("etag") == applied.get("etag"):
                applied["updated_at"] = updated_at
                return None
        if answer.status == 304:
            return None
        etag, body = answer.headers.get("etag", ""), None
        try:
            body = answer.json()
            if "delta_from" in body and not follows(body, applied):
                log.warning("fleet delta from version %s, this router holds %s: the whole "
                            "list asked", body.get("from_serial"), applied.get("serial"))
                answer = self._client.request("GET", f"/rules/{kind}",
                                              headers={"Accept-Encoding": "gzip"})
                etag, body = answer.headers.get("etag", ""), answer.json()
            payload = self._applied(kind, held, body)
        except NOT_APPLIED as error:
            if not isinstance(body, dict) or "delta_from" not in body:
                return self._failed(kind, etag, error)
            # A delta that does not apply: the whole list, before this version is marked
            # failed (and not asked again until it changes).
            log.warning("fleet delta to %s not applied (%s): the whole list asked", etag, error)
            try:
                answer = self._client.request("GET", f"/rules/{kind}",
                                              headers={"Accept-Encoding": "gzip"})
                etag, body = answer.headers.get("etag", ""), answer.json()
                payload = self._applied(kind, held, body)
            except NOT_APPLIED as error:
                return self._failed(kind, etag, error)
        self._state.values["applied"][kind] = {"etag": etag, "updated_at": updated_at,
                                               "at": now()}
        if kind == "fleet":  # kept, for the next delta
            write_atomically(self._fleet_kept, json.dumps(
                {"etag": etag, "document": payload}).encode(), 0o600)
            self._state.values["applied"][kind].update(
                serial=serial_of(answer, body), delta="delta_from" in body)
        if kind == "ids":
            self._enforcement.rule_sources(payload["rules"])
        self._state.values["failed"].pop(kind, None)
        log.info("%s payload %s applied to %s", kind, etag, self._files[kind])
        return True, ""

    def _applied(self, kind: str, held: dict | None, body: dict) -> dict:
        """The payload `body` (whole, or a delta to the fleet's list `held`) leads to,
        installed."""
        payload = fleet_applied(held, body) if "delta_from" in body else body
        content, wanted = render(kind, payload, self._config)
        self._install(kind, content, wanted)
        return payload

    def _failed(self, kind: str, etag: str, error: Exception) -> tuple[bool, str]:
        log.error("%s payload %s not applied: %s", kind, etag, error)
        self._state.values["failed"][kind] = etag
        self._state.error(f"{kind} payload not applied: {error}")
        return False, f"{kind}: {error}"

    def _held_fleet(self, etag: str | None) -> dict | None:
        """The fleet's list applied as `etag`, as kept; None when there is none to apply a
        delta to (none kept, or another list's: a stop between the two writes)."""
        try:
            kept = json.loads(self._fleet_kept.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(kept, dict) or not etag or kept.get("etag") != etag:
            return None
        document = kept.get("document")
        if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
            return None  # (damaged: a delta applied to it would fail, and be refused again)
        return document

    def _install(self, kind: str, content: bytes, wanted: dict[str, list[str]] | None
                 ) -> None:
        """Write the payload's file and load it: for a block list, only what changed in its
        sets when they can be read (agent/nftsets.py), from the reading that counts what
        they dropped."""
        target = self._files[kind]
        loaded = target
        held = read_sets(self._config, wanted) if wanted is not None else None
        if wanted is not None and held is not None:
            self._enforcement.counted(kind, list(held.values()))
            loaded = target.with_name(target.name + ".changes")
            write_atomically(loaded, changes_file(self._config.nft_table, wanted, held,
                                                  f"{kind} list"))
        previous = target.with_name(target.name + ".prev")
        had_previous = target.exists()
        if had_previous:
            write_atomically(previous, target.read_bytes())
        write_atomically(target, content)
        test, reload = (self._config.command(name, loaded) for name in self._commands[kind])
        try:
            _run(test, "test")
            _run(reload, "reload")
        except InstallError:
            if had_previous:
                write_atomically(target, previous.read_bytes())
                if loaded == target:  # (a file of changes failed whole: nothing changed)
                    _run_quietly(reload)  # the previous files back in force
            else:
                target.unlink(missing_ok=True)
            raise

    def _report(self, ok: bool, detail: str | None) -> None:
        applied = self._state.values["applied"]
        report = {"ids_etag": applied.get("ids", {}).get("etag"),
                  "firewall_etag": applied.get("firewall", {}).get("etag"), "ok": ok}
        if detail:
            report["detail"] = plain_text(detail)[:MAX_DETAIL]
        self._state.values["last_apply"] = {"at": now(), "ok": ok, "detail": detail}
        self._state.save()
        self._client.request("POST", "/rules/applied", json.dumps(report).encode(),
                             headers={"Content-Type": "application/json"})


def _run(command: list[str], what: str) -> None:
    if not command:
        return
    try:
        done = subprocess.run(command, capture_output=True, timeout=COMMAND_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise InstallError(f"{what} command {command[0]}: {error}") from None
    if done.returncode != 0:
        output = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
        last = output.splitlines()[-1] if output else ""
        raise InstallError(f"{what} command exited {done.returncode}: {last}")


def _run_quietly(command: list[str]) -> None:
    try:
        _run(command, "reload")
    except InstallError as error:
        log.error("reloading the previous files failed too: %s", error)


def plain_text(text: str) -> str:
    return "".join(char if char.isprintable() else " " for char in text)


def render(kind: str, payload: dict, config: AgentConfig
           ) -> tuple[bytes, dict[str, list[str]] | None]:
    """The payload's file, and for a block list the elements of each of its sets."""
    if kind == "ids":
        return ids_file(payload), None
    if kind == "fleet":
        sets, title = {4: config.nft_set_fleet_v4, 6: config.nft_set_fleet_v6}, "fleet list"
    else:
        sets = {4: config.nft_set_v4, 6: config.nft_set_v6}
        title = f"block list, ruleset {payload.get('version')}"
    wanted = block_sets(payload, sets)
    return whole_file(config.nft_table, wanted, title), wanted


def ids_file(payload: dict) -> bytes:
    lines = [f"# router-backend IDS rules, ruleset {payload.get('version')}: "
             f"{len(payload['rules'])} rules"]
    for rule in payload["rules"]:
        raw = rule["raw"]
        if not isinstance(raw, str) or "\n" in raw or "\r" in raw:
            raise PayloadError(f"rule {rule.get('sid')} is not one line")
        lines.append(raw)
    return ("\n".join(lines) + "\n").encode()


def block_sets(payload: dict, sets: dict[int, str]) -> dict[str, list[str]]:
    """Each set's addresses (IPv4, IPv6), every one checked to be an address."""
    families: dict[str, list[str]] = {sets[4]: [], sets[6]: []}
    for entry in payload["entries"]:
        try:
            address = ipaddress.ip_address(entry["address"])
        except (ValueError, TypeError):
            raise PayloadError(f"not an IP address: {entry.get('address')!r}") from None
        families[sets[address.version]].append(str(address))
    return families
