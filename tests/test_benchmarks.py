"""Quick versions of the benchmarks (bench/ingest.py, bench/polling.py and others):
each command runs as an operator runs it, its server under its real load generator, for a
second or so, so that the commands keep working. Their figures belong in bench/README.md
and are not asserted here: this machine is shared and its speed varies from day to day. What
is asserted is what each must never do: lose a record, answer anything but 2xx/3xx, or write
to the database while answering 304."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from testkit import REPOSITORY

pytestmark = pytest.mark.drill  # benchmarks under load (wrk)


def run_benchmark(*arguments: str) -> str:
    completed = subprocess.run([sys.executable, "-m", *arguments], capture_output=True,
                               text=True, cwd=REPOSITORY, timeout=600)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    return completed.stdout


def test_ingestion_benchmark_with_two_workers_stores_every_record():
    """The command fails when the database holds other than the records sent."""
    output = run_benchmark("bench.ingest", "--records", "4000", "--per-request", "1000",
                           "--concurrency", "2", "--workers", "2", "--rounds", "1")
    assert float(re.search(r"ratio HTTP/COPY: ([\d.]+)", output).group(1)) > 0
    peaks = re.search(r"peak RSS of the serving process\(es\): (.+) MiB", output).group(1)
    assert len(peaks.split(",")) == 2  # both HTTP workers


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk (Debian package) is not installed")
def test_polling_benchmark_answers_304_without_writing():
    """The command fails on any answer but 2xx/3xx; every path is loaded and answers; the
    polls write no row."""
    output = run_benchmark("bench.polling", "--routers", "20", "--seconds", "1",
                           "--rounds", "1")
    writes = re.search(r"rows written to the service's tables during the 304 runs: (\d+)"
                       r"(?: \((.*)\))?", output)
    # A scheduled job's tick may fall in the runs (one is due every 10 minutes and at minutes
    # 5, 17, 27 and 47 of the hour, and the intel match every minute, which moves its mark;
    # the activation days' job at minute 27 moves its watermark, `activation_rollup`, even
    # with nothing to roll up): the jobs' own bookkeeping is the only write allowed.
    written = dict(entry.rsplit(" ", 1) for entry in (writes.group(2) or "").split(", ") if entry)
    assert set(written) <= {"job_ticks", "job_runs", "intel_live_mark",
                            "activation_rollup"}, output
    for label in ("constant aiohttp handler", "constant, 2 processes", "GET /rules/ids 304",
                  "304, 2 HTTP workers", "GET /rules/ids 200 gzip", "GET /rules/last_updated"):
        rate = re.search(rf"{re.escape(label)} +([\d,]+) req/s", output)
        assert rate and int(rate.group(1).replace(",", "")) > 0, output
    assert re.search(r"2 HTTP workers vs 1 on the 304 path: [\d.]+x", output), output


def test_paired_ingestion_on_the_corpus_mix_stores_every_record_on_both_sides():
    """bench/pair.py runs the benchmark in turn in two checkouts (here this one twice)
    and compares their medians; the corpus mix posts to both endpoints, and each run fails
    when either endpoint's records are not all stored."""
    output = run_benchmark("bench.pair", "--before", str(REPOSITORY), "--before-python",
                           sys.executable, "--runs", "1", "bench.ingest", "--records",
                           "3000", "--per-request", "1000", "--rounds", "1", "--body", "corpus")
    runs = re.findall(r"run 1 +(before|this): +([\d,]+) +against COPY: ([\d.]+)", output)
    assert [side for side, _, _ in runs] == ["before", "this"], output
    assert all(int(rate.replace(",", "")) > 0 and float(ratio) > 0 for _, rate, ratio in runs)
    assert re.search(r"this/before: [\d.]+ on the medians", output), output


def test_interleaved_ingestion_pair_runs_both_servers_and_checks_every_record():
    """bench/ingest_pair.py: the other checkout's server on a database its own `migrate`
    made (here this checkout again), rounds alternating; a round fails when a side stored
    other than the records sent."""
    output = run_benchmark("bench.ingest_pair", "--before", str(REPOSITORY),
                           "--before-python", sys.executable, "--records", "2000",
                           "--per-request", "500", "--rounds", "2", "--body", "corpus")
    rounds = re.findall(r"round \d: before ([\d,]+), this ([\d,]+) records/s", output)
    assert len(rounds) == 2, output
    assert all(int(n.replace(",", "")) > 0 for pair in rounds for n in pair), output
    assert re.search(r"this/before: [\d.]+ on the medians, [\d.]+ the median", output), output


def test_hunt_benchmark_builds_packs_and_hunts_a_small_fleet():
    """bench/hunt.py writes through the service's postings statement (a change of its
    parameters once broke the command unnoticed), packs and hunts."""
    output = run_benchmark("bench.hunt", "--routers", "300", "--days", "3",
                           "--distinct-days", "1")
    assert re.search(r"300 routers × 3 days .*: [\d,]+ postings", output), output
    assert float(re.search(r"([\d.]+) bytes a posting", output).group(1)) > 0
    hunts = re.findall(r"hunt, (rare|about 1 %|every router)[^:]*: p50 [\d.]+ ms", output)
    assert {"rare", "about 1 %", "every router"} <= set(hunts), output


def test_storage_benchmark_measures_the_agents_day():
    """bench/storage.py, small: the agent's day (2,000 records: two routers sending
    1,000 a day) is stored, compacted on its schedule and measured open, closed and past
    the fleet job's window, and the disk formula is printed from it."""
    output = run_benchmark("bench.storage", "--routers", "5", "--records", "2000")
    figure = r" +(\d+) bytes a record \(chunks (\d+), summaries (\d+)\)"
    day = re.search(r"the agent's day \(1,000 records a router in 2-record uploads over a "
                    r"day, 2 routers[^)]*\), past the fleet job's window \(every summary "
                    rf"packed\):{figure}; closed \([^)]*\):{figure}; open:{figure}", output)
    assert day, output
    packed, closed, opened = (tuple(int(n) for n in day.groups()[at:at + 3])
                              for at in (0, 3, 6))
    # Chunks: the same once closed (a day this small is not worth its rewrite: the close's
    # merge adds its last remainder beside the old one).
    assert 0 < packed[1] == closed[1] and opened[1] > 0, output
    assert 0 < packed[2] <= closed[2] <= opened[2], output          # summaries
    formula = re.search(r"N x R x \(D x ~(\d+) \+ ~(-?\d+) \+ \(S - 2\) x ~(\d+) \+ "
                        r"~(\d+) \+ ~(\d+)\) bytes", output)
    assert formula, output
    expected = (packed[1], opened[1] - packed[1], packed[2], closed[2], opened[2])
    assert all(abs(int(printed) - figure) <= 1   # each rounded apart
               for printed, figure in zip(formula.groups(), expected)), output


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk (Debian package) is not installed")
def test_flood_benchmark_keeps_each_flooder_within_its_budget_over_its_cycles():
    """bench/hunt_flood.py, small: two cycles of quiet and flooded time, fresh flooders
    each; the floods grow the index by at most the budget their network shares (plus one
    upload's values, docs/security.md), and the pooled ratio is printed."""
    output = run_benchmark("bench.hunt_flood", "--flooders", "3", "--seconds", "2",
                           "--after", "1", "--cycles", "2", "--budget", "100")
    floods = re.findall(r"the index grew by (\d+) postings, the most one flooder posted "
                        r"(\d+) \(budget 100\)", output)
    assert len(floods) == 2, output
    # The flooders are fresh MACs of one address: they share one budget for its network
    # across both cycles (docs/security.md), so the first cycle takes it and the second
    # adds what is left, if anything.
    assert 0 < int(floods[0][1]) <= 100 + 2_000, output
    assert sum(int(grew) for grew, _ in floods) <= 100 + 2_000, output
    assert re.search(r"3 flooder\(s\) over 2 cycles: .* [\d.]+x \(the cycles' ratios "
                     r"[\d.]+, [\d.]+\)", output), output


def test_weekly_reports_benchmark_reports_every_owner_once():
    output = run_benchmark("bench.weekly_reports", "--routers", "600", "--hourly-rows", "2",
                           "--big-owner", "100")
    made = re.search(r"weekly reports: ([\d,]+) made for ([\d,]+) routers", output)
    assert made and made.groups() == ("251", "600"), output
