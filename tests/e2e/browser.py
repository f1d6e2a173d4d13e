"""Headless Chromium from Debian's packages, driven by Selenium, and the API as its own process.

No browser or driver is downloaded: Selenium is pointed at ``/usr/bin/chromium`` and
``/usr/bin/chromedriver`` (the same Debian source, so their versions match). The flags keep
Chromium quiet on a closed network. Under ``CI=true`` a missing browser fails the test.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = os.environ.get("SAGAFLOW_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SAGAFLOW_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--window-size=1400,1000")


def need_browser() -> None:
    """A missing browser fails the test, never skips it: like Postgres and Kafka, it is a
    real part the suite needs (``.ci/run`` installs it)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        pytest.fail(f"no {' or '.join(missing)}: apt-get install chromium chromium-driver "
                    "(.ci/run does)")


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    need_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def api_process(env: Mapping[str, str], args: list[str], log: Path) -> Iterator[str]:
    """``python -m coordinator api`` on a free port; yields its base URL once it answers."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "api", "--host", "127.0.0.1",
             "--port", str(port), *args],
            env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"the API exited: {log.read_text()[-2000:]}")
                try:
                    if httpx.get(f"{base}/ui/login", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"the API did not start: {log.read_text()[-2000:]}")
                time.sleep(0.2)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def sign_in(driver: Any, base: str, page: str, token: str) -> None:
    """Open ``page``, get sent to sign in with it as ``next``, sign in, land on it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base}{page}")
    assert "/ui/login" in driver.current_url
    assert driver.find_element(By.NAME, "next").get_attribute("value") == page
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "sign-in").click()
    # A click does not wait for the navigation it starts.
    WebDriverWait(driver, 15).until(lambda d: d.find_elements(By.ID, "whoami"))
    assert driver.current_url.endswith(page)


def sign_out(driver: Any) -> None:
    """Sign out and wait for the sign-in page, so a later navigation cannot race the POST."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.ID, "sign-out").click()
    WebDriverWait(driver, 15).until(
        lambda d: "Signed out" in " ".join(e.text for e in d.find_elements(By.ID, "flash")))
    assert "/ui/login" in driver.current_url


def click_through(driver: Any, element: Any) -> None:
    """Click something that loads a new page, and wait until the old page is gone (reading
    the page right after a click may otherwise read the one being left)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 15).until(lambda _d: _gone(old))


def _gone(element: Any) -> bool:
    """Whether ``element``'s page was left. Chromedriver reports an element of the page being
    swapped out either as stale or, in a race, as a node that "does not belong to the
    document" (a plain WebDriverException): both mean gone."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False
