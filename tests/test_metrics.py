"""GET /metrics: Prometheus text with request, ingestion, queue and pool figures."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

HEADERS = {"X-ID": "aa:bb:cc:00:00:07", "Content-Type": "application/x-ndjson"}


async def scrape(client) -> dict[tuple[str, tuple], float]:
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    samples = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


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
