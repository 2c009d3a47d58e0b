"""The console in a real browser (Debian's Chromium driven by Selenium) against the real
server, on a listener of its own (CONSOLE_LISTEN), with the corpus ruleset and real EVE
records: support finds a router by MAC and reads its story, records carrying HTML and script
are shown as text and run nothing, an operator disables a rule that fired and the router's
next IDS payload lacks it; support hunts a signature across the fleet and reads the records
that carry it. A screenshot of each page goes to test-output/console/."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest

from server.console.auth import hash_secret
from testkit import REPOSITORY
from testkit.corpus import corpus_path, publish_corpus_ruleset
from testkit.database import Sql
from testkit.server import ServerRunner, free_port
from testkit.waiting import generated_after

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [pytest.mark.drill, pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="Debian's chromium and chromium-driver are not installed (.ci/run installs them)")]

MAC = "aa:bb:cc:00:35:02"
TYPED_MAC = "AA-BB-CC-00-35-02"   # as a subscriber reads it off the label
SUPPORT, OPERATOR = ("sam", "support-secret-1234"), ("olga", "operator-secret-1234")
SCREENSHOTS = REPOSITORY / "test-output" / "console"
HOSTILE = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>"
FIRED_SID = 2018489   # ET SCAN NMAP OS Detection Probe, in the corpus EVE and ruleset


def hostile_records() -> list[bytes]:
    record = {"timestamp": "2026-11-24T10:00:00.000000+0000", "event_type": "alert",
              "src_ip": "203.0.113.9", "src_port": 4444, "dest_ip": "192.168.1.20",
              "dest_port": 80, "proto": "TCP", "flow_id": 1,
              "alert": {"action": "allowed", "gid": 1, "signature_id": 9000001, "rev": 1,
                        "signature": f"ET POLICY {HOSTILE}", "severity": 2},
              "http": {"hostname": f"{HOSTILE}.example", "url": "/\"><script>alert(1)</script>",
                       "http_user_agent": f"Mozilla {HOSTILE}"}}
    return [orjson.dumps(record)]


def post(url: str, path: str, body: bytes, content_type: str) -> dict:
    request = urllib.request.Request(url + path, data=body, method="POST", headers={
        "X-ID": MAC, "Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return orjson.loads(answer.read())


def ids_sids(url: str) -> set[int]:
    request = urllib.request.Request(url + "/rules/ids", headers={"X-ID": MAC})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return {rule["sid"] for rule in orjson.loads(answer.read())["rules"]}


def report_applied(url: str) -> None:
    """What an agent reports once it loaded the payloads it fetched."""
    etags = {}
    for kind in ("ids", "firewall"):
        request = urllib.request.Request(f"{url}/rules/{kind}", headers={"X-ID": MAC})
        with urllib.request.urlopen(request, timeout=60) as answer:
            etags[f"{kind}_etag"] = answer.headers["ETag"]
    answer = post(url, "/rules/applied", orjson.dumps({**etags, "ok": True,
                                                        "detail": "loaded"}),
                  "application/json")
    assert answer == {"ids_current": True, "firewall_current": True}


@pytest.fixture
async def served(database, tmp_path):
    rules = publish_corpus_ruleset(database, tmp_path)
    console_port = free_port()
    users = ",".join(f"{name}:{role}:{hash_secret(secret)}" for (name, secret), role
                     in ((SUPPORT, "support"), (OPERATOR, "operator")))
    server = ServerRunner(database, tmp_path, RULE_GENERATION_ENABLED="true", **rules,
                          CONSOLE_USERS=users, CONSOLE_SECRET="c" * 40,
                          CONSOLE_LISTEN=f"127.0.0.1:{console_port}").start()
    sql = Sql(database)
    try:
        lines = corpus_path("eve", "lab-sensor-eve.json").read_bytes().splitlines()
        records = [orjson.loads(line) for line in lines if line.strip()]
        alerts = [orjson.dumps(r) for r in records if r.get("event_type") == "alert"]
        flows = [orjson.dumps(r) for r in records if r.get("event_type") == "flow"]
        ndjson = "application/x-ndjson"
        assert post(server.url, "/log/events", b"\n".join(alerts + hostile_records()),
                    ndjson)["rejected"] == 0
        assert post(server.url, "/log/cfm", b"\n".join(flows), ndjson)["rejected"] == 0
        with urllib.request.urlopen(urllib.request.Request(
                server.url + "/rules/last_updated", headers={"X-ID": MAC}), timeout=60):
            pass
        moment = sql.value("SELECT now()")
        sql.rows("UPDATE generation_queue SET next_due_at = now() WHERE mac = %s", (MAC,))
        await generated_after(sql, moment, [MAC], timeout=120)
        report_applied(server.url)
        yield server, f"http://127.0.0.1:{console_port}", sql
    finally:
        server.stop()


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,2400"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver, name: str) -> Path:
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def sign_in(driver, console: str, who: tuple[str, str]) -> None:
    driver.get(console + "/console/")
    assert "/console/sign-in" in driver.current_url
    driver.find_element(By.NAME, "name").send_keys(who[0])
    driver.find_element(By.NAME, "secret").send_keys(who[1])
    driver.find_element(By.CSS_SELECTOR, "form[action='/console/sign-in'] button").click()
    WebDriverWait(driver, 10).until(text_shown((By.TAG_NAME, "header"), f"{who[0]} ("))


def text_shown(locator: tuple[str, str], text: str):
    """selenium's text_to_be_present_in_element, also while a click's navigation replaces the
    page: Chromium reports an element found in the page being left as not belonging to the
    document (CI), where selenium expects it stale and waits on."""
    present = expected_conditions.text_to_be_present_in_element(locator, text)

    def shown(driver) -> bool:
        try:
            return present(driver)
        except WebDriverException as error:
            if "does not belong to the document" in str(error):
                return False
            raise

    return shown


def arrived(driver, path: str) -> None:
    """Wait for the navigation a click or a submitted form started to land on `path`."""
    WebDriverWait(driver, 10).until(expected_conditions.url_to_be(driver_url(driver, path)))


def driver_url(driver, path: str) -> str:
    scheme_and_host = driver.current_url.split("/console/", 1)[0]
    return scheme_and_host + path


def section(driver, name: str) -> str:
    return driver.find_element(By.ID, name).text


async def test_support_reads_a_routers_whole_story_and_nothing_it_sent_runs(served, browser):
    server, console, _ = served
    with pytest.raises(urllib.error.HTTPError) as on_router_listener:
        urllib.request.urlopen(server.url + "/console/sign-in", timeout=10)
    assert on_router_listener.value.code == 404
    on_router_listener.value.close()
    sign_in(browser, console, SUPPORT)
    screenshot(browser, "fleet")
    assert "1 registered" in browser.find_element(By.TAG_NAME, "main").text
    browser.find_element(By.NAME, "mac").send_keys(TYPED_MAC + "\n")
    arrived(browser, f"/console/routers/{MAC}")
    screenshot(browser, "router")
    registration = section(browser, "registration")
    assert "registered" in registration and "last poll" in registration
    assert "127.0.0.1" in registration
    payloads = section(browser, "payloads")
    assert "rules of ruleset" in payloads and "Firewall:" in payloads
    telemetry = section(browser, "telemetry")
    assert "ET SCAN NMAP OS Detection Probe" in telemetry
    assert str(FIRED_SID) in telemetry
    assert "last generated" in section(browser, "generation")
    assert "runs the current payloads" in section(browser, "applied")
    # What the router sent is on the page as text, and ran nothing.
    alerts = section(browser, "recent-alerts")
    assert HOSTILE in alerts and f"Mozilla {HOSTILE}" in alerts
    assert browser.execute_script("return window.pwned") is None
    assert browser.execute_script("return document.images.length") == 0
    assert browser.find_elements(By.CSS_SELECTOR, "main script") == []
    # Support sees no forms that change anything.
    assert browser.find_elements(By.CSS_SELECTOR, "form[action^='/console/tuning']") == []
    browser.get(console + "/console/tuning")
    screenshot(browser, "tuning-support")
    assert "changes need an operator" in browser.find_element(By.TAG_NAME, "main").text


async def test_an_operator_disables_a_rule_and_the_next_payload_lacks_it(served, browser):
    server, console, sql = served
    assert FIRED_SID in ids_sids(server.url)
    sign_in(browser, console, OPERATOR)
    browser.get(f"{console}/console/routers/{MAC}")
    form = browser.find_element(By.CSS_SELECTOR, "#overrides form")
    form.find_element(By.NAME, "selector").send_keys(str(FIRED_SID))
    form.find_element(By.NAME, "note").send_keys("a lab scanner")
    moment = sql.value("SELECT now()")
    form.find_element(By.TAG_NAME, "button").click()
    WebDriverWait(browser, 10).until(text_shown((By.ID, "changes"), f"disable {FIRED_SID}"))
    assert browser.current_url.endswith(f"/console/routers/{MAC}")
    changes = section(browser, "changes")
    assert "console:olga" in changes and f"disable {FIRED_SID}" in changes
    assert f"{FIRED_SID}" in section(browser, "overrides")
    await generated_after(sql, moment, [MAC], timeout=120)
    assert FIRED_SID not in ids_sids(server.url)
    browser.get(f"{console}/console/routers/{MAC}")
    screenshot(browser, "router-after-override")
    browser.get(console + "/console/tuning")
    screenshot(browser, "tuning-operator")
    assert "a lab scanner" in section(browser, "overrides")


async def test_support_hunts_a_signature_and_reads_the_records_that_carry_it(served, browser):
    """The Hunt page (issue 52): the router that saw the signature is listed and linked; its
    records page shows the records that carry it, what the router sent as text only; both
    the hunt and the reading are recorded."""
    _, console, sql = served
    sign_in(browser, console, SUPPORT)
    browser.get(console + "/console/hunt")
    browser.find_element(By.NAME, "indicators").send_keys("sid 9000001")
    browser.find_element(By.CSS_SELECTOR, "form[action='/console/hunt'] button").click()
    WebDriverWait(browser, 10).until(text_shown((By.ID, "matches"), "1 match"))
    screenshot(browser, "hunt")
    assert browser.find_elements(By.CSS_SELECTOR, f"#matches a[href='/console/routers/{MAC}']")
    assert "drill-downs made" not in browser.find_element(By.TAG_NAME, "main").text  # operators'
    browser.find_element(By.LINK_TEXT, "records").click()
    arrived(browser, f"/console/routers/{MAC}/records?match=sid%3A9000001")
    screenshot(browser, "hunt-records")
    shown = browser.find_element(By.TAG_NAME, "main").text
    assert HOSTILE in shown and "9000001" in shown
    assert browser.execute_script("return window.pwned") is None
    assert browser.execute_script("return document.images.length") == 0
    assert sql.rows("SELECT asked_by, via, matches, router::text FROM hunt_log "
                    "ORDER BY id") == [(f"console:{SUPPORT[0]}", "console", 1, None),
                                       (f"console:{SUPPORT[0]}", "console", 1, MAC)]


CHART_LABELS = """
return Array.from(document.querySelectorAll('svg.chart')).map(chart =>
  Array.from(chart.querySelectorAll('text')).map(text => {
    const box = text.getBoundingClientRect();
    return {text: text.textContent, left: box.left, right: box.right, height: box.height};
  }));
"""


@pytest.mark.parametrize("width", [1200, 800])
async def test_the_fleet_pages_chart_labels_never_overlap(served, browser, width):
    """A new user found the labels of "Routers by last poll" written over each other at
    1200 px. At 1200 and 800 px each chart's labels stand apart and are at least 7 px."""
    _, console, _ = served
    browser.set_window_size(width, 1000)
    sign_in(browser, console, SUPPORT)
    screenshot(browser, f"fleet-{width}px")
    charts = browser.execute_script(CHART_LABELS)
    assert charts and any(len(labels) > 2 for labels in charts)
    for labels in charts:
        for left, right in zip(labels, labels[1:]):
            assert left["right"] <= right["left"], (width, left, right)
        assert all(label["height"] >= 7 for label in labels), (width, labels)
