"""Prometheus metrics, served at GET /metrics.

A single process (HTTP_WORKERS=1) counts for itself in a registry of its app's own. Under the
supervisor (server/process/supervisor.py) every process of the host writes its values to files in
one directory (prometheus_client's multiprocess mode, switched on by the supervisor through
PROMETHEUS_MULTIPROC_DIR in its children's environment), and whichever HTTP worker answers a
scrape reports the whole host: counters and histograms summed over every process that ever
ran since start-up, gauges per their mode below (`live...`: processes alive now). Values that
live in the database (the generation queue) are read when scraped.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from server.process.background import LoopHealth

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self, multiprocess_dir: str | None = None) -> None:
        """`multiprocess_dir`: the directory every process of the host writes to (the
        supervisor's), whose sum a scrape reports; None: this process alone."""
        self.multiprocess_dir = multiprocess_dir
        self.registry = CollectorRegistry()
        registry = self.registry
        self.requests = Counter("http_requests", "HTTP requests answered",
                                ["route", "method", "status"], registry=registry)
        self.request_seconds = Histogram("http_request_duration_seconds",
                                         "Time to answer an HTTP request", ["route"],
                                         buckets=DURATION_BUCKETS, registry=registry)
        self.request_tally = RequestTally(self.requests, self.request_seconds)
        self.records = Counter("telemetry_records", "Telemetry records in acknowledged requests",
                               ["kind", "outcome"], registry=registry)
        self.generations = Counter("rule_generations", "Per-router generations run here",
                                   ["outcome"], registry=registry)
        self.generation_seconds = Histogram("rule_generation_duration_seconds",
                                            "Time to generate one router's rules",
                                            buckets=DURATION_BUCKETS, registry=registry)
        self.queue = Gauge("rule_generation_queue_routers", "Routers in the generation queue "
                           "(whole database): claimed, due, overdue (due for over an hour), "
                           "failing (last generation failed), total", ["state"],
                           multiprocess_mode="mostrecent", registry=registry)
        # `job_name`, not `job`: Prometheus keeps `job` for the scrape job.
        self.job_runs = Counter("job_runs", "Background job runs", ["job_name", "outcome"],
                                registry=registry)
        self.notifications = Counter("notification_deliveries", "Email delivery attempts",
                                     ["outcome"], registry=registry)
        self.db_pool = Gauge("db_pool_connections", "Database pool connections (summed over "
                             "the host's processes)", ["state"], multiprocess_mode="livesum",
                             registry=registry)
        self.etag_cache_routers = Gauge("rule_etag_cache_entries", "Payload ETags kept to "
                                        "answer 304 without a query (summed over the host's "
                                        "HTTP processes)", multiprocess_mode="livesum",
                                        registry=registry)
        self.etag_cache_listening = Gauge("rule_etag_cache_listening", "1 while payload change "
                                          "notifications arrive in every HTTP process (else "
                                          "some process bypasses its cache; processes "
                                          "without a cache report 1)",
                                          multiprocess_mode="livemin", registry=registry)
        self.auth_events = Counter("router_auth_events", "Router key and enrollment events: "
                                   "enrolled, enroll_refused, enroll_conflict, key_refused",
                                   ["event"], registry=registry)
        self.limited = Counter("router_requests_limited", "Requests refused with 429 by a "
                               "flood limit: requests, records or registrations",
                               ["limit"], registry=registry)
        self.ruleset_published = Gauge("ruleset_published_timestamp_seconds", "When the "
                                       "ruleset in use was published (0: none yet)",
                                       multiprocess_mode="mostrecent", registry=registry)
        self.generation_workers = Gauge("rule_generation_workers",
                                        "Generation worker processes on this host",
                                        multiprocess_mode="livesum", registry=registry)
        self.http_workers = Gauge("http_worker_processes", "Processes serving HTTP requests on "
                                  "this host (live ones)", multiprocess_mode="livesum",
                                  registry=registry)
        self.loop_last_success = Gauge("background_loop_last_success_timestamp_seconds",
                                       "When each long-running loop last did its work "
                                       "(generation dispatch and renewal, ETag cache, "
                                       "telemetry tally, notification retries, jobs); its "
                                       "start until the first success",
                                       ["loop"], multiprocess_mode="max", registry=registry)

    def loop_health(self, name: str, logger) -> LoopHealth:
        """The health reporter of one long-running loop (server/process/background.py)."""
        return LoopHealth(name, logger, self.loop_last_success.labels(name))

    def exposition(self) -> web.Response:
        self.request_tally.flush()  # this process's requests so far are in the answer
        registry = self.registry
        if self.multiprocess_dir:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=self.multiprocess_dir)
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})


def route_label(request: web.Request) -> str:
    """The route's template (`/api/notifications/{notificationId}/read`), never the raw path,
    so that labels stay few."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


class RequestTally:
    """Answered requests counted and timed (`http_requests_total`,
    `http_request_duration_seconds`) once per event-loop iteration instead of once per
    request: a 304 rules poll costs about 30 microseconds of CPU, and updating a counter and a
    histogram for it cost 3 to 5 more under the supervisor, where every update writes to a
    shared memory-mapped file (and asks the kernel for the process id). The requests of an
    iteration are added up by (route, method, status) and their durations into the
    histogram's buckets in this process, then written in one update per counter and per
    bucket when the loop is done with its callbacks, or before a scrape. A crash loses at
    most the counts of the iteration under way."""

    def __init__(self, requests: Counter, request_seconds: Histogram) -> None:
        self._requests = requests
        self._request_seconds = request_seconds
        # (route, method, status) -> its labelled counter and histogram, looked up once:
        # labels() takes a lock and builds a key on every call.
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        # (route, method, status) -> [requests, seconds, requests per duration bucket]
        self._pending: dict[tuple[str, str, int], list] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        tally = self._pending.get(key)
        if tally is None:
            if not self._pending:
                asyncio.get_running_loop().call_soon(self.flush)
            tally = self._pending[key] = [0, 0.0, [0] * (len(DURATION_BUCKETS) + 1)]
        tally[0] += 1
        tally[1] += seconds
        tally[2][bisect_left(DURATION_BUCKETS, seconds)] += 1  # the last: +Inf

    def flush(self) -> None:
        for key, (requests, seconds, per_bucket) in self._pending.items():
            counter, histogram = self._child(key)
            counter.inc(requests)
            add_observations(histogram, seconds, per_bucket)
        self._pending.clear()

    def _child(self, key: tuple[str, str, int]) -> tuple[Counter, Histogram]:
        child = self._children.get(key)
        if child is None:
            route, method, status = key
            child = self._children[key] = (self._requests.labels(route, method, str(status)),
                                           self._request_seconds.labels(route))
        return child


def add_observations(histogram: Histogram, seconds: float, per_bucket: list[int]) -> None:
    """What `histogram.observe` would have recorded for durations adding up to `seconds`,
    `per_bucket[i]` of them in its i-th bucket (the first whose bound they do not exceed).
    prometheus_client has no call for this, so it updates the sum and buckets that observe()
    updates; tests/test_metrics.py checks the result against observe()."""
    histogram._sum.inc(seconds)
    for bucket, count in zip(histogram._buckets, per_bucket):
        if count:
            bucket.inc(count)


def request_middleware(metrics: Metrics):
    observe = metrics.request_tally.observe

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as error:
            status = error.status
            raise
        finally:
            observe(route_label(request), request.method, status,
                    time.perf_counter() - started)
    return middleware
