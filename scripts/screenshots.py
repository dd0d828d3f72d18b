"""Photograph the running demo's console for the README (run by scripts/screenshots)."""

from __future__ import annotations

import argparse
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

VIEWPORT = {"width": 1280, "height": 860}
#: Long enough for the stories to be under way: the flaky call retried, the deploy waiting for DNS.
SETTLE_SECONDS = 25


def wait_for_server(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"{url}/admin/login/", timeout=2)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    options = parser.parse_args()
    wait_for_server(options.url)
    password = (options.dir / "var" / "demo" / "admin-password").read_text().strip()
    time.sleep(SETTLE_SECONDS)
    options.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT, base_url=options.url)
        page.goto("/admin/login/?next=/admin/")
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url("**/admin/")
        page.goto("/admin/django_durajobs/job/dashboard/")
        page.screenshot(path=options.out / "console-dashboard.png", full_page=True)
        page.goto("/admin/django_durajobs/job/")
        page.screenshot(path=options.out / "console-job-list.png")
        page.get_by_role("link", name="Fetch exchange rates").first.click()
        page.wait_for_selector("#durajobs-summary")
        page.screenshot(path=options.out / "console-job-page.png", full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
