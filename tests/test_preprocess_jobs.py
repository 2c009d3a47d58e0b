"""The preprocess job as operators run it: the command, the cron tick shared by several
server processes, and kills at random moments."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from ruledata.build import read_manifest
from ruledata.compromised import COMPROMISED_IPS_FILE
from ruledata.workspace import Workspace
from server.db.lifecycle import open_database
from server.db import jobs as ledger
from server.jobs import cron as cron_module
from server.jobs import MOST_JOBS
from server.jobs.cron import JOB_LEASE, CronJobs, run_job
from server.jobs.schedule import first_download_at_start, scheduled_jobs
from server.metrics import Metrics
from testkit.database import command_env, settings_for
from testkit.rule_archives import fixture_members, make_zip
from tests.commands import run_program


def feed_env(settings, feed_dir) -> dict:
    return command_env(settings,
                       RULE_PREPROCESS_VERSION_URL=(feed_dir / "version.txt").as_uri(),
                       RULE_PREPROCESS_ARCHIVE_URL=(feed_dir / "archive.zip").as_uri())


def publish_feed(feed_dir, version: str, extra: dict | None = None) -> None:
    feed_dir.mkdir(exist_ok=True)
    (feed_dir / "archive.zip").write_bytes(make_zip(fixture_members(extra)))
    (feed_dir / "version.txt").write_text(version)


def run_command(env) -> subprocess.CompletedProcess:
    return run_program("ops.rulepreprocess", env)


def test_command_publishes_then_reports_unchanged_then_fails_clearly(settings, tmp_path):
    feed_dir = tmp_path / "feed"
    publish_feed(feed_dir, "7")
    env = feed_env(settings, feed_dir)
    first = run_command(env)
    assert first.returncode == 0, first.stderr
    assert "ruleset 7 published: 14 rules" in first.stdout
    assert "downloading" in first.stderr
    second = run_command(env)
    assert second.returncode == 0 and "already in use" in second.stdout

    (feed_dir / "version.txt").write_text("8")
    (feed_dir / "archive.zip").write_bytes(b"truncated")
    failed = run_command(env)
    assert failed.returncode == 1
    assert "rulepreprocess: error:" in failed.stderr and "previous ruleset" in failed.stderr
    assert read_manifest(settings.rule_data_path / "rulefile_json")["version"] == "7"


def test_a_local_archive_is_published_offline(settings, tmp_path):
    """`rulepreprocess --archive FILE`: the feed's URLs (here a port nothing listens on) are
    not asked; the version is --version's, or the archive's digest (so a second run with the
    same file publishes nothing)."""
    archive = tmp_path / "rules.zip"
    archive.write_bytes(make_zip(fixture_members()))
    env = command_env(settings, RULE_PREPROCESS_VERSION_URL="http://127.0.0.1:9/version.txt",
                      RULE_PREPROCESS_ARCHIVE_URL="http://127.0.0.1:9/archive.zip")

    def offline(*args: str) -> subprocess.CompletedProcess:
        return run_program("ops.rulepreprocess", env, *args)

    named = offline("--archive", str(archive), "--version", "20200616")
    assert named.returncode == 0, named.stderr
    assert "ruleset 20200616 published: 14 rules" in named.stdout
    assert "127.0.0.1:9" not in named.stderr
    digested = offline("--archive", str(archive))
    assert digested.returncode == 0, digested.stderr
    assert "ruleset local-" in digested.stdout and "published" in digested.stdout
    again = offline("--archive", str(archive))
    assert "already in use" in again.stdout
    assert read_manifest(settings.rule_data_path / "rulefile_json")["version"].startswith("local-")
    missing = offline("--archive", str(tmp_path / "absent.zip"))
    assert missing.returncode == 1 and "no such archive file" in missing.stderr
    # A new user's finding: an empty archive printed a 17-line traceback. One line now.
    for content, why in ((b"", "the archive is empty (0 bytes)"),
                         (b"not an archive at all", "archive is damaged or not a zip/tar.gz")):
        (broken := tmp_path / "broken.zip").write_bytes(content)
        failed = offline("--archive", str(broken))
        errors = [line for line in failed.stderr.splitlines() if "error" in line.lower()]
        assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
        assert len(errors) == 1 and why in errors[0], failed.stderr
    usage = offline("--version", "1")
    assert usage.returncode == 2 and "--version goes with --archive" in usage.stderr


def ruleset_is_whole(root) -> str:
    """The ruleset in use is complete: its manifest and every file it lists parse."""
    manifest = read_manifest(root / "rulefile_json")
    for name in manifest["files"]:
        orjson.loads((root / "rulefile_json" / name).read_bytes())
    assert (root / "rules" / "rules" / "compromised-ips.txt").exists()
    return manifest["version"]


@pytest.mark.slow
def test_kill_at_random_moments_leaves_a_whole_ruleset(settings, tmp_path):
    feed_dir = tmp_path / "feed"
    publish_feed(feed_dir, "100")
    env = feed_env(settings, feed_dir)
    assert run_command(env).returncode == 0
    rng = random.Random(42)
    seen = set()
    for round_number in range(10):
        version = str(101 + round_number)
        extra = {f"rules/round{round_number}.rules":
                 f'alert tcp any any -> any any (msg:"r{round_number}"; sid:{8_000_000 + round_number};)\n'.encode()}
        publish_feed(feed_dir, version, extra)
        process = subprocess.Popen([sys.executable, "-m", "ops.rulepreprocess"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 1.5))
        process.send_signal(signal.SIGKILL)
        process.wait()
        seen.add(ruleset_is_whole(settings.rule_data_path))
    # Each run either never switched or switched completely; a later run finishes the job.
    final = run_command(env)
    assert final.returncode == 0, final.stderr
    assert ruleset_is_whole(settings.rule_data_path) == "110"
    assert seen <= {str(v) for v in range(100, 111)}


def counting_job(runs: list, seconds: float = 0.0):
    """A job that notes each of its runs in `runs` (and takes `seconds`)."""
    async def job() -> dict:
        runs.append(1)
        await asyncio.sleep(seconds)
        return {"ok": True}
    return job


async def test_cron_tick_runs_once_across_processes(settings, sql):
    runs = []
    job = counting_job(runs, 0.2)

    async with open_database(settings) as db_a, open_database(settings) as db_b:
        schedulers = [CronJobs(db, retry_delay=0.01, retry_attempts=2) for db in (db_a, db_b)]
        tick = datetime.now(timezone.utc).replace(second=0, microsecond=0)
        await asyncio.gather(*(s._tick("demo", job, tick) for s in schedulers))
        for scheduler in schedulers:
            await scheduler.stop()
    assert len(runs) == 1
    assert sql.rows("SELECT job, status FROM job_runs") == [("demo", "succeeded")]
    assert sql.value("SELECT count(*) FROM job_ticks WHERE job = 'demo'") == 1


async def test_jobs_running_at_once_leave_the_pool_to_requests(database, tmp_path, sql):
    """A running job held a pool connection idle for its advisory lock: jobs falling due
    together on a pool of three waited for a fourth connection until they failed, and a
    health check waited 4.5 s behind them (CI). The lock has a connection of its own now."""
    settings = settings_for(database, tmp_path, DB_POOL_MAX="1", DB_TIMEOUT_SECONDS="2")

    async with open_database(settings) as db:
        inside, release = asyncio.Semaphore(0), asyncio.Event()

        async def job() -> dict:
            await db.fetchone("SELECT 1")
            inside.release()
            await release.wait()  # holding its lock, no pool connection
            return {"ok": True}

        runs = asyncio.gather(*(run_job(db, f"demo-{n}", job) for n in range(3)))
        for _ in range(3):
            await asyncio.wait_for(inside.acquire(), 30)
        # with a job's lock on a pool connection this waits DB_TIMEOUT_SECONDS and fails
        assert await db.fetchone("SELECT 1") == (1,)
        release.set()
        outcomes = await runs
    assert [outcome.status for outcome in outcomes] == ["succeeded"] * 3
    assert sql.value("SELECT count(*) FROM job_runs WHERE status = 'succeeded'") == 3


async def test_the_supervisor_counts_a_lock_connection_for_every_job(database, tmp_path):
    settings = settings_for(database, tmp_path, DATA_RETENTION_ENABLED="true",
                            RULE_PREPROCESS_AT_START="false")
    async with open_database(settings) as db:
        jobs = scheduled_jobs(db, settings, Metrics())
        await jobs.stop()
    assert len(jobs.names) == MOST_JOBS


async def test_the_ruleset_download_turned_off_is_neither_scheduled_nor_run_at_start(
        database, tmp_path):
    """A new user offline found nothing that turned the scheduled download off (README says
    to): the service retried the feed's host every 30 s for ever. `off` turns both off."""
    on = settings_for(database, tmp_path, RULE_PREPROCESS_AT_START="true")
    off = settings_for(database, tmp_path, RULE_PREPROCESS_AT_START="true",
                       RULE_PREPROCESS_CRON_SCHEDULE="off")
    assert first_download_at_start(on) and not first_download_at_start(off)
    async with open_database(off) as db:
        jobs = scheduled_jobs(db, off, Metrics())
        await jobs.stop()
    assert "rulepreprocess" not in jobs.names and len(jobs.names) == MOST_JOBS - 2


async def test_a_tick_claim_whose_answer_was_lost_is_still_run(settings, sql):
    """The claim committed but its answer never came back (the connection failed): a later
    claim of the same claimant takes it again; another claimant still gets nothing while the
    lease is live."""
    runs = []
    job = counting_job(runs)

    async with open_database(settings) as db:
        cron, other = (CronJobs(db, retry_delay=0.01, retry_attempts=1) for _ in range(2))
        tick = datetime(2026, 11, 24, 3, 17, tzinfo=timezone.utc)
        await ledger.add_tick(db, "demo", tick)
        assert await ledger.claim_tick(db, "demo", cron.claimant, JOB_LEASE) is not None  # lost
        await other._tick("demo", job, tick)
        assert runs == []
        await cron._tick("demo", job, tick)
        await cron._tick("demo", job, tick)  # done already: not run twice
    assert runs == [1]
    assert sql.rows("SELECT job, status FROM job_runs") == [("demo", "succeeded")]
    assert sql.rows("SELECT claimed_by, next_due_at FROM job_ticks") == [(None, None)]


async def test_a_tick_whose_claimant_died_is_taken_up_by_another_process(settings, sql):
    """The claimant was SIGKILLed while the job ran: its lease runs out and the next process
    that looks for due ticks runs the tick; the dead claimant's late outcome is refused."""
    runs = []
    job = counting_job(runs)

    async with open_database(settings) as db:
        dead, alive = (CronJobs(db, retry_delay=0.01, retry_attempts=1) for _ in range(2))
        tick = datetime(2026, 11, 24, 3, 20, tzinfo=timezone.utc)
        await ledger.add_tick(db, "demo", tick)
        tick_id = await ledger.claim_tick(db, "demo", dead.claimant, timedelta(minutes=10))
        await alive._take_up("demo", job)
        assert runs == []  # the lease is live
        sql.rows("UPDATE job_ticks SET claimed_until = now() - interval '1 second'")
        await alive._take_up("demo", job)  # the lease ran out
        await ledger.finish_tick(db, tick_id, dead.claimant)  # too late: not its own
    assert runs == [1]
    assert sql.rows("SELECT claimed_by, next_due_at, attempts FROM job_ticks") == [
        (None, None, 0)]


async def test_a_job_that_keeps_failing_is_given_up_with_its_error(settings, sql):
    attempts = []

    async def broken() -> dict:
        attempts.append(1)
        raise ConnectionError("feed unreachable")

    async with open_database(settings) as db:
        cron = CronJobs(db, retry_delay=0.01, retry_attempts=2)
        tick = datetime(2026, 11, 24, 3, 30, tzinfo=timezone.utc)
        await cron._tick("broken", broken, tick)
        await cron._take_up("broken", broken)  # given up: not due any more
    assert len(attempts) == 3
    assert sql.rows("SELECT attempts, last_error, next_due_at, claimed_by FROM job_ticks") == [
        (3, "feed unreachable", None, None)]


async def test_a_new_tick_supersedes_an_older_one_waiting_for_its_retry(settings, sql):
    async with open_database(settings) as db:
        first = datetime(2026, 11, 24, 3, 0, tzinfo=timezone.utc)
        await ledger.add_tick(db, "demo", first)
        await ledger.add_tick(db, "demo", first + timedelta(hours=1))
        superseded = sql.value("SELECT id FROM job_ticks WHERE tick = %s", (first,))
        assert not await ledger.claim_again(db, superseded, "any", JOB_LEASE)  # nothing to do
    assert sql.rows("SELECT tick, next_due_at IS NULL, last_error FROM job_ticks "
                    "ORDER BY tick") == [(first, True, "superseded by a later tick"),
                                         (first + timedelta(hours=1), False, None)]


async def test_failed_job_is_retried_within_the_tick(settings, sql):
    attempts = []

    async def flaky() -> dict:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("feed unreachable")
        return {"ok": True}

    metrics = Metrics()
    async with open_database(settings) as db:
        tick = datetime.now(timezone.utc).replace(second=0, microsecond=0)
        await CronJobs(db, retry_delay=0.01, retry_attempts=3, metrics=metrics)._tick(
            "flaky", flaky, tick)
    assert len(attempts) == 3
    assert [r[0] for r in sql.rows("SELECT status FROM job_runs ORDER BY id")] == \
        ["failed", "failed", "succeeded"]
    runs = {outcome: metrics.registry.get_sample_value(
        "job_runs_total", {"job_name": "flaky", "outcome": outcome}) for outcome in ("failed",
                                                                               "succeeded")}
    assert runs == {"failed": 2, "succeeded": 1}


def test_workspace_paths_match_the_seed(tmp_path):
    workspace = Workspace(tmp_path)
    workspace.prepare()
    assert workspace.root / COMPROMISED_IPS_FILE == tmp_path / "rules" / "rules" / "compromised-ips.txt"
    assert (tmp_path / "idps_rules").is_dir() and (tmp_path / "rulefile_json").is_symlink()


async def test_each_tick_of_a_schedule_is_taken_up_when_it_comes(settings, monkeypatch):
    """The schedule's loop (cronsim): it waits until each tick, then hands that tick over."""
    waits, ticks = [], []

    async def waited(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) > 2:
            await asyncio.Event().wait()  # until stopped

    async def taken_up(name: str, function, tick: datetime) -> None:
        ticks.append(tick)

    monkeypatch.setattr(cron_module, "pause", waited)
    async with open_database(settings) as db:
        jobs = CronJobs(db, retry_delay=0.01, retry_attempts=0)
        monkeypatch.setattr(jobs, "_tick", taken_up)
        before = datetime.now(timezone.utc)
        jobs.add("demo", "*/5 * * * *", lambda: None)
        while len(ticks) < 2:
            await asyncio.sleep(0.01)
        await jobs.stop()
    assert all(tick.minute % 5 == 0 and tick.second == 0 for tick in ticks)
    assert before < ticks[0] <= before + timedelta(minutes=5)
    assert ticks[1] - ticks[0] == timedelta(minutes=5)
    assert abs(waits[0] - (ticks[0] - before).total_seconds()) < 1
