#!/usr/bin/env python3
"""Opens rankpulse's experiment page in Debian's headless chromium (through chromedriver and
Selenium) and reports what a person would see, as one JSON object on stdout, for
tests/experiment_page.rs to judge.

    browser.py PLAN.json

PLAN is a list of visits, each an object:
    url          the page (http://user:password@host:port/... or file:///...)
    screenshot   where to save a PNG of the whole page
    width, height  the window (a phone is 390 x 844)
    api          optional: the daemon's base URL; the page's figures are compared with
                 /api/v1/experiments/<name> (and its /dimensions and /queries under `breakdown`)
                 fetched just before and just after the page loaded:
                 the page is rendered from one state of the daemon, so it must equal one of
                 the two fetches whole (the figures move about once a second in the demo, and
                 on a loaded machine a load often spans a move); retried while it equals
                 neither, up to 40 times, then compared with the second
    reports      optional: `replay --format json`'s output, whose cumulative reports (and each
                 experiment's breakdown, under `breakdown`) the page's figures are compared with
    auth         optional: "user:password" for the API fetches

Per visit it reports: console messages at level WARNING or above, every request the page made
(from the DevTools performance log), the series of every chart, the figures compared and those
that differ, the navigation timing, and whether the page is wider than the window.
"""

import base64
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def driver():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        # Nothing may leave the host: a name that is not local does not resolve, so a request to
        # one fails and shows in the console and the performance log.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--allow-file-access-from-files",
    ]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)


def fetch_json(url, auth):
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def fetch_report(base, entry, auth):
    """An experiment's cumulative report, with its breakdown (the `/dimensions` and `/queries`
    documents, when the listing links them) under `breakdown`, where the page's breakdown
    figures are placed."""
    report = fetch_json(base + "/api/v1/experiments/" + urllib.parse.quote(entry["experiment"], safe=""), auth)
    breakdown = {}
    for link, key in (("dimensions_href", "dimensions"), ("queries_href", "queries")):
        if link not in entry:
            continue
        try:
            document = fetch_json(base + entry[link], auth)
        except urllib.error.HTTPError as e:
            if e.code == 404:  # no finalized breakdown yet
                continue
            raise
        if document.get(key):
            breakdown[key] = document[key]
    if breakdown:
        report["breakdown"] = breakdown
    return report


def name(text):
    """A key, field or value of a path as it is in the report: the page percent-encodes every
    one (UTF-8, all but RFC 3986's unreserved characters), so none holds `|`, `&`, `=` or `{`."""
    return urllib.parse.unquote(text, errors="strict")


def resolve(report, path):
    """A figure's place in a report: `|`-separated keys, a list element chosen by
    `field=value` (several joined by `&`), a list index by number; split on the syntax first,
    then each name decoded."""
    node = report
    for part in path:
        if isinstance(node, list):
            if "=" in part:
                pairs = [kv.split("=") for kv in part.split("&")]
                if any(len(kv) != 2 for kv in pairs):
                    raise KeyError(f"{part}: not field=value pairs")
                wanted = {name(k): name(v) for k, v in pairs}
                matches = [e for e in node if all(str(e.get(k)) == v for k, v in wanted.items())]
                if len(matches) != 1:
                    raise KeyError(f"{part}: {len(matches)} matches")
                node = matches[0]
            else:
                node = node[int(part)]
        else:
            node = node[name(part)]
    return node


def page_figures(browser):
    # A figure's path: the `data-b` of every enclosing element, outermost first, then its own
    # `data-f`, or for a table cell without one its column's `data-col` with the row's
    # `data-row` for `{row}` (which no encoded name can contain); the first part is the
    # experiment's name. Every name in a path is percent-encoded (see `name`).
    return browser.execute_script(
        """return Array.from(document.querySelectorAll('[data-v]')).map(e => {
            let own = e.dataset.f;
            if (own === undefined) {
                const th = e.closest('table').tHead.rows[0].cells[e.cellIndex];
                own = th.dataset.col.replace('{row}', () => e.parentElement.dataset.row);
            }
            const parts = [own];
            for (let n = e.parentElement; n; n = n.parentElement) {
                if (n.dataset && n.dataset.b) parts.unshift(n.dataset.b);
            }
            return { figure: parts.join('|'), value: e.dataset.v, text: e.textContent };
        });"""
    )


def compare(figures, reports):
    """The figures whose value is not the report's, or whose text is not the value rounded."""
    wrong = []
    for f in figures:
        experiment, *path = f["figure"].split("|")
        experiment = name(experiment)
        try:
            want = resolve(reports[experiment], path)
        except (KeyError, IndexError, ValueError) as e:
            wrong.append({**f, "error": f"not in the report: {e}"})
            continue
        shown = float(f["value"])
        if not isinstance(want, (int, float)) or float(want) != shown:
            wrong.append({**f, "want": want})
            continue
        # The text is the value, rounded for people.
        text = f["text"].replace(",", "").replace("+", "").replace("%", "")
        try:
            as_text = float(text)
        except ValueError:
            wrong.append({**f, "error": "text is not a number"})
            continue
        scale = 100.0 if f["text"].endswith("%") else 1.0
        if abs(as_text - shown * scale) > max(abs(shown * scale) * 5e-3, 5e-4 * scale, 0.5 if abs(shown) >= 1000 else 0):
            wrong.append({**f, "error": "text is not the value rounded"})
    return wrong


def requests_made(browser):
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def visit(browser, plan):
    browser.set_window_size(plan.get("width", 1280), plan.get("height", 1000))
    auth = plan.get("auth")
    reports = None
    attempts = 0
    while True:
        attempts += 1
        before = None
        if plan.get("api"):
            listing = fetch_json(plan["api"] + "/api/v1/experiments", auth)["experiments"]
            before = {e["experiment"]: fetch_report(plan["api"], e, auth) for e in listing}
        browser.get(plan["url"])
        timing = browser.execute_script(
            """const n = performance.getEntriesByType('navigation')[0];
               return {response_end_ms: n.responseEnd, dom_content_loaded_ms: n.domContentLoadedEventEnd,
                       load_ms: n.loadEventEnd, transfer_bytes: n.transferSize, html_bytes: n.decodedBodySize};"""
        )
        figures = page_figures(browser)
        if plan.get("api"):
            after = {e["experiment"]: fetch_report(plan["api"], e, auth) for e in listing}
            # A page between two moves equals both fetches; one rendered just before or just
            # after a move equals one of them whole. Mixed figures are never accepted.
            matching = [r for r in (after, before) if not compare(figures, r)]
            if not matching and attempts < 40:
                continue
            reports = matching[0] if matching else after
        elif plan.get("reports"):
            with open(plan["reports"]) as f:
                replayed = json.load(f)
            reports = {r["experiment"]: r for r in replayed["experiments"] if r["window"] == "cumulative"}
            # Each experiment's breakdown, where the page places its figures.
            for breakdown in replayed.get("breakdowns", []):
                reports[breakdown["experiment"]]["breakdown"] = breakdown
        break
    # A paint after load, so the timing covers layout too.
    paint = browser.execute_script(
        """return performance.getEntriesByType('paint').map(p => [p.name, p.startTime]);"""
    )
    charts = browser.execute_script(
        """return Array.from(document.querySelectorAll('svg.chart')).map(svg => ({
            title: svg.getAttribute('aria-label'),
            kind: svg.closest('figure') ? svg.closest('figure').dataset.chart || 'traffic' : 'other',
            metric: svg.closest('[data-metric]') ? svg.closest('[data-metric]').dataset.metric : null,
            experiment: svg.closest('[data-experiment]') ? svg.closest('[data-experiment]').dataset.experiment : null,
            series: Array.from(svg.querySelectorAll('g.series')).map(g => g.dataset.series) }));"""
    )
    layout = browser.execute_script(
        """return {scroll_width: document.documentElement.scrollWidth, inner_width: window.innerWidth,
                   title: document.title, text: document.body.innerText,
                   headings: Array.from(document.querySelectorAll('h1, h2, h3, h4')).map(h => h.textContent)};"""
    )
    if plan.get("screenshot"):
        height = browser.execute_script("return document.documentElement.scrollHeight;")
        browser.set_window_size(plan.get("width", 1280), min(max(height, plan.get("height", 1000)), plan.get("max_height", 3000)))
        browser.save_screenshot(plan["screenshot"])
    console = [
        {"level": e["level"], "message": e["message"]}
        for e in browser.get_log("browser")
        if e["level"] in ("WARNING", "SEVERE")
    ]
    result = {
        "url": plan["url"],
        "attempts": attempts,
        "console": console,
        "requests": requests_made(browser),
        "charts": charts,
        "figures": len(figures),
        "timing": timing,
        "paint": paint,
        "layout": layout,
    }
    if reports is not None:
        result["wrong_figures"] = compare(figures, reports)[:20]
        result["compared_experiments"] = sorted(reports)
    return result


def main():
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    browser = driver()
    try:
        results = [visit(browser, v) for v in plan]
    finally:
        browser.quit()
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
