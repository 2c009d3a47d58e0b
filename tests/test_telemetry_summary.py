"""Generation reads the hourly summaries written at ingestion (issue 32): on the corpus, they
give the same summary as the row tables of before gave for the same uploads (the statement
of before, run on the same records as rows), and so the same payloads."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path


from engine.generate import PayloadLimits, TelemetrySummary
from engine.worker import GenerationJob, generate_for_router
from server.db.connect import connect
from server.generation.sql import (MAX_ALERTS, MAX_FIRED_SIDS, TELEMETRY_SUMMARY,
                                    TOP_FLOW_VALUES)
from server.jobs.preprocess import run_preprocess
from testkit import CORPUS
from testkit.rule_archives import ruleset_settings
from testkit.telemetry import SUMMARY_OF_BEFORE, load_record_tables

MAC = "aa:bb:cc:00:32:10"

PARAMS = {"owner": "test", "mac": MAC, "lease": timedelta(minutes=1),
          "window": timedelta(days=7), "severity": 2, "sids": MAX_FIRED_SIDS,
          "top": TOP_FLOW_VALUES, "alerts": MAX_ALERTS, "detail_from": "-infinity"}


def corpus_bodies(kind: str, size: int) -> list[bytes]:
    lines = []
    for path in sorted((CORPUS / "eve").glob("*.json")):
        lines += [line for line in path.read_bytes().splitlines()
                  if line.strip() and f'"event_type":"{kind}"'.encode() in line.replace(b" ", b"")]
    return [b"\n".join(lines[n:n + size]) for n in range(0, len(lines), size)]


def summaries(location) -> tuple[list, list]:
    conn = connect(location)
    try:
        with conn.cursor() as cur:
            cur.execute(TELEMETRY_SUMMARY, PARAMS)
            now = list(cur.fetchone()[0:4])
            load_record_tables(cur, location)
            cur.execute(SUMMARY_OF_BEFORE, PARAMS)
            before = list(cur.fetchone())
    finally:
        conn.close()
    return now, before


def in_order(summary: list) -> list:
    """The pairs ordered whole (both statements order them by count only)."""
    fired, apps, ports, alerts = summary
    return [fired, apps, ports, sorted(alerts or [], key=lambda row: (-row[4], str(row)))]


def payloads(settings, summary: list, tmp_path: Path) -> tuple[bytes, bytes]:
    fired, apps, ports, alerts = summary
    job = GenerationJob(MAC, str((settings.rule_data_path / "current").resolve()),
                        str(tmp_path / "rules"), TelemetrySummary(
                            fired=[tuple(row) for row in fired], app_protos=apps,
                            dest_ports=ports, alerts=[tuple(row) for row in alerts]),
                        PayloadLimits(550, 10_000))
    result = generate_for_router(job)
    return result.ids_gz, result.firewall_gz


async def test_summary_and_payloads_equal_those_of_the_row_tables(database, tmp_path,
                                                                   make_client):
    settings = ruleset_settings("corpus", database, tmp_path)
    await run_preprocess(settings)
    client = await make_client(settings)
    headers = {"X-ID": MAC, "Content-Type": "application/x-ndjson"}
    for path, kind in (("/log/events", "alert"), ("/log/cfm", "flow")):
        for body in corpus_bodies(kind, 97):  # several uploads, as an agent sends them
            response = await client.post(path, data=body, headers=headers)
            assert response.status == 200 and (await response.json())["rejected"] == 0
    now, before = summaries(database)
    assert all(now) and len(now[0]) > 10 and len(now[3]) > 5
    assert in_order(now) == in_order(before)
    assert payloads(settings, now, tmp_path) == payloads(settings, before, tmp_path)
