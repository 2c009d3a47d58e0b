"""GET /metrics: Prometheus text with request, ingestion, queue and pool figures, served to
local scrapers only; what a configuration exposes on a public address."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.handlers.operations import may_scrape
from testkit.database import settings_for

HEADERS = {"X-ID": "aa:bb:cc:00:00:07", "Content-Type": "application/x-ndjson"}


def parsed(text: str) -> dict[tuple[str, tuple], float]:
    """Prometheus text as {(sample name, sorted labels): value}."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


async def scrape(client) -> dict[tuple[str, tuple], float]:
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    return parsed(await response.text())


def sample(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_metrics_count_requests_records_and_queue(client, settings):
    body = b'{"event_type": "alert"}\n{"src_port": "x"}\n{"event_type": "alert"}\n'
    assert (await client.post("/log/events", data=body, headers=HEADERS)).status == 200
    assert (await client.get("/rules/ids", headers=HEADERS)).status == 404
    assert (await client.get("/rules/ids")).status == 401
    await client.get("/api/workflow/users/nobody/notifications")

    samples = await scrape(client)
    assert sample(samples, "http_requests_total", route="/log/events", method="POST",
                  status="200") == 1
    assert sample(samples, "http_requests_total", route="/rules/ids", method="GET",
                  status="404") == 1
    assert sample(samples, "http_requests_total", route="/rules/ids", method="GET",
                  status="401") == 1
    assert sample(samples, "http_requests_total", method="GET", status="404",
                  route="/api/workflow/users/{userId}/notifications") == 1
    assert sample(samples, "telemetry_records_total", kind="events", outcome="accepted") == 2
    assert sample(samples, "telemetry_records_total", kind="events", outcome="rejected") == 1
    assert sample(samples, "rule_generation_queue_routers", state="total") == 1
    assert sample(samples, "rule_generation_queue_routers", state="due") == 1
    assert sample(samples, "db_pool_connections", state="max") == settings.db_pool_max
    assert sample(samples, "rule_generation_workers") == 0  # RULE_GENERATION_ENABLED=false
    assert sample(samples, "http_request_duration_seconds_count", route="/log/events") == 1
    assert sample(samples, "rule_etag_cache_entries") == 0  # nothing generated, nothing kept


async def test_unknown_paths_share_one_label(client):
    for path in ("/nope", "/nope/2", "/wp-login.php"):
        assert (await client.get(path)).status == 404
    samples = await scrape(client)
    assert sample(samples, "http_requests_total", route="unmatched", method="GET",
                  status="404") == 3


async def test_metrics_only_for_local_scrapers_or_the_token(make_client, database, tmp_path):
    """Issue 12: /metrics answered the world. Through the proxy (which adds X-Forwarded-For)
    it is refused; a loopback client without one, or the METRICS_TOKEN bearer, is answered."""
    client = await make_client(settings_for(database, tmp_path,
                                            METRICS_TOKEN="scrape-token-0123456789"))
    assert (await client.get("/metrics")).status == 200
    for header in ({"X-Forwarded-For": "203.0.113.5"}, {"Forwarded": "for=203.0.113.5"},
                   {"X-Forwarded-For": "203.0.113.5",
                    "Authorization": "Bearer scrape-token-012345678"}):
        response = await client.get("/metrics", headers=header)
        assert response.status == 403 and "METRICS_TOKEN" in (await response.json())["error"]
    with_token = await client.get("/metrics", headers={
        "X-Forwarded-For": "203.0.113.5", "Authorization": "Bearer scrape-token-0123456789"})
    assert with_token.status == 200 and "http_requests_total" in await with_token.text()


@pytest.mark.parametrize("remote,headers,token,allowed", [
    ("127.0.0.1", {}, "", True), ("::1", {}, "", True), ("127.3.4.5", {}, "", True),
    ("192.0.2.10", {}, "", False), ("2001:db8::1", {}, "", False), ("", {}, "", False),
    (None, {}, "", False), ("not-an-address", {}, "", False),
    ("192.0.2.10", {"Authorization": "Bearer secret-secret-secret"}, "secret-secret-secret",
     True),
    ("192.0.2.10", {"Authorization": "Bearer secret"}, "", False),
    ("127.0.0.1", {"X-Real-IP": "192.0.2.10"}, "", False),
])
def test_who_may_scrape(remote, headers, token, allowed):
    assert may_scrape(remote, headers, token) is allowed
