"""The agent's one configuration file (INI, section [agent]); agent/router-agent.example.ini
documents every option. Commands are split like a shell would (no shell runs them) and may
name {rules_file} and {firewall_file} (for the fleet's list, the firewall commands run with
{firewall_file} naming fleet_file)."""

from __future__ import annotations

import configparser
import shlex
from dataclasses import dataclass, fields
from pathlib import Path
from urllib.parse import urlsplit


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class AgentConfig:
    server_url: str
    mac: str
    state_dir: Path
    eve_json: Path
    rules_file: Path
    firewall_file: Path
    enrollment_token: str = ""
    key_file: Path | None = None            # default: state_dir/key
    test_command: tuple[str, ...] = ()
    reload_command: tuple[str, ...] = ()
    firewall_test_command: tuple[str, ...] = ()
    firewall_reload_command: tuple[str, ...] = ()
    nft_table: str = "inet filter"
    nft_set_v4: str = "router_backend_block_v4"
    nft_set_v6: str = "router_backend_block_v6"
    fleet_list: bool = True                 # apply the fleet's shared block list too
    fleet_file: Path | None = None          # default: beside firewall_file, "-fleet" added
    nft_set_fleet_v4: str = "router_backend_fleet_v4"
    nft_set_fleet_v6: str = "router_backend_fleet_v6"
    intel: bool = True                      # apply the threat intelligence document too
    intel_dir: Path | None = None           # its rules and datasets; default: beside rules_file
    nft_set_intel_v4: str = "router_backend_intel_v4"  # interval sets: networks too
    nft_set_intel_v6: str = "router_backend_intel_v6"
    # What this router can hold, said on every request (Router-Capacity,
    # docs/router-api.md): dataset entries its Suricata loads, the bytes it gives them (0:
    # not said), whether its Suricata has JA4, the entries one of its firewall sets
    # holds (0: not said, the default: the sets docs/agent.md declares have no `size`), and
    # the IDS rules its Suricata loads (0: not said; a service before it refuses the name).
    dataset_entries: int = 10_000
    dataset_memory_bytes: int = 0
    ja4: bool = False
    set_entries: int = 0
    rule_count: int = 0
    # Report what the block-list sets dropped (POST /rules/enforced) every this many
    # seconds (0: never); their counters read with counters_command, {set} naming one set.
    enforcement_seconds: float = 3600.0
    counters_command: tuple[str, ...] = ("nft", "-j", "list", "set", "{set}")
    alert_types: tuple[str, ...] = ("alert",)
    flow_types: tuple[str, ...] = ("flow", "netflow")
    # Sent to /log/cfm with the flows and stored as sent: what the fleet's hunt indexes
    # (domains, TLS fingerprints, files; docs/agent.md).
    meta_types: tuple[str, ...] = ("dns", "tls", "http", "fileinfo", "smb", "ssh")
    upload_seconds: float = 10.0
    poll_seconds: float = 60.0
    batch_records: int = 5000
    batch_bytes: int = 8 * 1024 * 1024
    spool_max_bytes: int = 64 * 1024 * 1024
    timeout_seconds: float = 30.0
    retry_max_seconds: float = 300.0
    start_delay_max_seconds: float = 30.0

    @property
    def capacity_header(self) -> str:
        said = [f"datasets={max(0, self.dataset_entries)}", f"ja4={int(self.ja4)}"]
        if self.dataset_memory_bytes > 0:
            said.append(f"memory={self.dataset_memory_bytes}")
        if self.set_entries > 0:
            said.append(f"sets={self.set_entries}")
        if self.rule_count > 0:
            said.append(f"rules={self.rule_count}")
        return ", ".join(said)

    @property
    def key_path(self) -> Path:
        return self.key_file or self.state_dir / "key"

    @property
    def fleet_path(self) -> Path:
        firewall = self.firewall_file
        return self.fleet_file or firewall.with_name(f"{firewall.stem}-fleet{firewall.suffix}")

    @property
    def intel_path(self) -> Path:
        return self.intel_dir or self.rules_file.parent

    def command(self, name: str, firewall_file: Path | None = None,
                rules_file: Path | None = None) -> list[str]:
        return [part.format(rules_file=rules_file or self.rules_file,
                            firewall_file=firewall_file or self.firewall_file)
                for part in getattr(self, name)]


_REQUIRED = ("server_url", "mac", "state_dir", "eve_json", "rules_file", "firewall_file")
_COMMANDS = ("test_command", "reload_command", "firewall_test_command",
             "firewall_reload_command", "counters_command")
_LISTS = ("alert_types", "flow_types", "meta_types")


def load_config(path: Path) -> AgentConfig:
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    try:
        if not parser.read(path):
            raise ConfigError(f"{path}: cannot read the configuration file")
    except configparser.Error as error:
        raise ConfigError(f"{path}: {error}") from None
    if not parser.has_section("agent"):
        raise ConfigError(f"{path}: no [agent] section")
    section = parser["agent"]
    known = {field.name: field for field in fields(AgentConfig)}
    if unknown := set(section) - set(known):
        raise ConfigError(f"{path}: unknown options: {', '.join(sorted(unknown))}")
    if missing := [name for name in _REQUIRED if not section.get(name, "").strip()]:
        raise ConfigError(f"{path}: missing options: {', '.join(missing)}")
    values = {}
    for name, raw in section.items():
        values[name] = _parse(path, name, raw.strip(), known[name].type)
    config = AgentConfig(**values)
    if urlsplit(config.server_url).scheme not in ("http", "https"):
        raise ConfigError(f"{path}: server_url must be an http:// or https:// URL")
    return config


def _parse(path: Path, name: str, raw: str, kind: str):
    try:
        if name in _COMMANDS:
            return tuple(shlex.split(raw))
        if name in _LISTS:
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        if kind == "bool":
            if raw.lower() not in ("true", "false", "yes", "no", "on", "off", "1", "0"):
                raise ValueError(f"expected true or false, got {raw!r}")
            return raw.lower() in ("true", "yes", "on", "1")
        if kind == "float":
            return float(raw)
        if kind == "int":
            return int(raw)
        if "Path" in kind:
            return Path(raw) if raw else None
        return raw
    except ValueError as error:
        raise ConfigError(f"{path}: {name}: {error}") from None
