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

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from server.background import LoopHealth

# A method label beyond these is "OTHER": a client chooses the method, and labels must stay few.
HTTP_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))
# The label of requests no route has; each app's last routes are named after it
# (server/web/routes.py).
UNMATCHED = "unmatched"
# Requests are counted and timed in the metrics in batches, at most this long after they
# were answered (and before each scrape this process answers): the counter's and the
# histogram's calls for each request made the 304 rules poll, the hottest path, 15 % slower
# (paired wrk runs against the same code without them); batched, a third of that is left.
REQUEST_RECORD_SECONDS = 0.05
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
        # (route, method, status) -> its labelled counter and histogram, looked up once:
        # labels() takes a lock and builds a key on every call. (The route, not its label: no
        # property chain per request.)
        self._request_children: dict[tuple[object, str, int], tuple[Counter, Histogram]] = {}
        # (route, method, status) -> durations of the requests not yet recorded
        self._unrecorded: dict[tuple[object, str, int], list[float]] = {}
        self._declare_work(registry)
        self._declare_host(registry)
        self._declare_fleet(registry)

    def _declare_work(self, registry: CollectorRegistry) -> None:
        """What the service did: records, generations, jobs, deliveries, the loops."""
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
        self.loop_last_success = Gauge("background_loop_last_success_timestamp_seconds",
                                       "When each long-running loop last did its work "
                                       "(generation dispatch and renewal, ETag cache, "
                                       "telemetry tally, notification retries, jobs); its "
                                       "start until the first success",
                                       ["loop"], multiprocess_mode="max", registry=registry)

    def _declare_host(self, registry: CollectorRegistry) -> None:
        """The host's processes and what they hold."""
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
        self.generation_workers = Gauge("rule_generation_workers",
                                        "Generation worker processes on this host",
                                        multiprocess_mode="livesum", registry=registry)
        self.http_workers = Gauge("http_worker_processes", "Processes serving HTTP requests on "
                                  "this host (live ones)", multiprocess_mode="livesum",
                                  registry=registry)

    def _declare_fleet(self, registry: CollectorRegistry) -> None:
        """The routers: their keys and limits, the ruleset, the fleet's lists, enforcement."""
        self.auth_events = Counter("router_auth_events", "Router key and enrollment events: "
                                   "enrolled, enroll_refused, enroll_conflict, key_refused",
                                   ["event"], registry=registry)
        self.limited = Counter("router_requests_limited", "Requests refused with 429 by a "
                               "flood limit: requests, records or registrations",
                               ["limit"], registry=registry)
        self.ruleset_published = Gauge("ruleset_published_timestamp_seconds", "When the "
                                       "ruleset in use was published (0: none yet)",
                                       multiprocess_mode="mostrecent", registry=registry)
        self.fleet_entries = Gauge("fleet_list_entries", "Entries of the fleet's lists as the "
                                   "fleet job last stored them: attackers and outbreaks (kept "
                                   "in every IDS payload); served: entries of the document "
                                   "GET /rules/fleet serves (the allowlist's vetoes out)", ["list"],
                                   multiprocess_mode="mostrecent", registry=registry)
        self.fleet_job_seconds = Gauge("fleet_job_duration_seconds", "Time the fleet job's "
                                       "last run took", multiprocess_mode="mostrecent",
                                       registry=registry)
        self.enforced = Gauge("enforcement_last_day", "What the routers enforced in the "
                              "last day, per block list and IDS rule source (ids.*), as the "
                              "enforcement-figures job last counted it (routers that count "
                              "for the fleet): packets, bytes, alerts, routers and networks "
                              "it matched at",
                              ["list", "figure"], multiprocess_mode="mostrecent",
                              registry=registry)
        self.feed_enforced = Gauge("intel_feed_enforcement_last_day", "Per threat feed, the "
                                   "last day: packets and bytes dropped by its entries, "
                                   "networks they matched at, its values that never matched",
                                   ["feed", "figure"], multiprocess_mode="mostrecent",
                                   registry=registry)

    def loop_health(self, name: str, logger) -> LoopHealth:
        """The health reporter of one long-running loop (server/background.py)."""
        return LoopHealth(name, logger, self.loop_last_success.labels(name))

    def observe_request(self, request: web.Request, status: int, seconds: float) -> None:
        """Count and time an answered request: kept here, recorded in the metrics within
        REQUEST_RECORD_SECONDS (record_requests)."""
        method = request.method if request.method in HTTP_METHODS else "OTHER"
        key = (request.match_info.route, method, status)
        durations = self._unrecorded.get(key)
        if durations is None:
            if key not in self._request_children:
                route = route_label(request)
                self._request_children[key] = (
                    self.requests.labels(route, method, str(status)),
                    self.request_seconds.labels(route))
            if not self._unrecorded:
                asyncio.get_running_loop().call_later(REQUEST_RECORD_SECONDS,
                                                      self.record_requests)
            durations = self._unrecorded[key] = []
        durations.append(seconds)

    def record_requests(self) -> None:
        """Record the requests observed since the last time in the metrics."""
        unrecorded, self._unrecorded = self._unrecorded, {}
        for key, durations in unrecorded.items():
            counter, histogram = self._request_children[key]
            counter.inc(len(durations))
            for seconds in durations:
                histogram.observe(seconds)

    def exposition(self) -> web.Response:
        self.record_requests()
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
    if resource is None or is_unmatched(resource):
        return UNMATCHED
    return resource.canonical


def is_unmatched(resource) -> bool:
    """One of the routes an app answers paths it has no route for with."""
    return (resource.name or "").startswith(UNMATCHED)
