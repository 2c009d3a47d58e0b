"""One router's generation as a worker process runs it: load the ruleset (once per process and
version), generate, serialise, write the router's rule file. Returns only bytes and small
numbers. The caller (the server's generation task) does the database work around it."""

from __future__ import annotations

import gzip
import os
import time
from dataclasses import dataclass
from pathlib import Path

from engine.generate import PayloadLimits, TelemetrySummary, generate, seed_for
from engine.payloads import pack
from engine.ruleset import RulesetCache

_RULESETS = RulesetCache()


@dataclass(frozen=True)
class GenerationJob:
    mac: str
    version_dir: str          # the published ruleset to use (resolved `current`)
    rules_file: str           # where to write the router's .rules file
    summary: TelemetrySummary
    limits: PayloadLimits


@dataclass(frozen=True)
class GenerationResult:
    mac: str
    version: str
    ids_gz: bytes            # gzip of the canonical JSON (engine.payloads.pack)
    ids_etag: str
    firewall_gz: bytes
    firewall_etag: str
    stats: dict
    seconds: float


def generate_for_router(job: GenerationJob) -> GenerationResult:
    started = time.perf_counter()
    ruleset = _RULESETS.get(Path(job.version_dir))
    generated = generate(ruleset, job.summary, ruleset.compromised_ips, job.limits,
                         seed_for(job.mac, ruleset.version))
    ids_gz, ids_etag = pack(generated.ids)
    firewall_gz, firewall_etag = pack(generated.firewall)
    write_rules_file(Path(job.rules_file), job.mac, generated.ids)
    return GenerationResult(job.mac, ruleset.version, ids_gz, ids_etag, firewall_gz,
                            firewall_etag, generated.stats, time.perf_counter() - started)


RULES_FILE_GZIP_LEVEL = 9  # written once per generation, kept on disk for every router


def write_rules_file(path: Path, mac: str, ids_payload: dict) -> None:
    """The Suricata rule file for the router, replaced atomically; gzip-compressed when its
    name ends in `.gz` (a sixth of the size: disk per router is what limits a fleet)."""
    lines = [f"# IDS rules generated for {mac} from ruleset {ids_payload['version']}",
             f"# {ids_payload['rule_count']} rules", ""]
    lines += [rule["raw"] for rule in ids_payload["rules"]]
    content = ("\n".join(lines) + "\n").encode("utf-8")
    if path.suffix == ".gz":
        content = gzip.compress(content, compresslevel=RULES_FILE_GZIP_LEVEL, mtime=0)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(content)
    os.replace(temporary, path)

