"""A real browser on the Airflow UI, shared by the tests that drive it as a user would
(tests/integration/test_airflow_ui.py on the production-shaped stack,
tests/integration/test_first_hour_browser.py on `make ui`'s local Airflow).

Debian's headless chromium, driven by selenium through Debian's chromedriver (an explicit
driver: selenium never tries to download one). The gestures are the few a person makes:
log in, submit a DAG's Trigger form, open a run's Retrain tab, answer a Required Action.
Screenshots land in the test's folder and, with RETRAIN_SCREENSHOT_DIR set, there too
(docs/images: `RETRAIN_SCREENSHOT_DIR=docs/images`).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def need_browser() -> None:
    """Skip (fail on CI) where chromium or chromedriver is missing."""
    if not (CHROMIUM and CHROMEDRIVER):
        message = ("chromium and chromedriver are needed (Debian: apt-get install chromium "
                   "chromium-driver; .ci/run installs them)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


class Page:
    """Headless chromium on the UI, with the few gestures the test needs."""

    def __init__(self, base: str, shots: Path):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-background-networking",
                    "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1000"):
            options.add_argument(arg)
        # An explicit driver: selenium never tries to download one.
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.base, self.shots = base, shots

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def park(self) -> None:
        """A blank page while a test waits on the REST API: an Airflow page left open on a
        DAG with an active run refreshes itself every few seconds, about a quarter of a
        core for chromium and the API server (measured: 23 + 4.5 CPU-s in 90 s, against
        1.3 + 0.3 on a blank page), taken from the runs being waited for."""
        self.driver.switch_to.default_content()
        self.driver.get("about:blank")

    def text(self) -> str:
        from selenium.webdriver.common.by import By
        return self.driver.find_element(By.TAG_NAME, "body").text

    def wait_for(self, what: str, predicate, timeout: float = 60, reload_every: float = 0,
                 on_timeout=lambda: ""):
        """Poll the page until predicate(page text) is truthy; reload it every
        `reload_every` s (a run's state changes on the server, not in the open page)."""
        deadline = time.time() + timeout
        last_reload = time.time()
        while True:
            try:
                value = predicate(self.text())
            except Exception:  # noqa: BLE001 - the page is still rendering
                value = None
            if value:
                return value
            if time.time() > deadline:
                shot = self.shot("timeout.png")
                raise AssertionError(f"the page never showed {what} in {timeout:.0f} s "
                                     f"(screenshot {shot}):\n{self.text()[-1500:]}\n"
                                     f"{on_timeout()}")
            if reload_every and time.time() - last_reload > reload_every:
                self.driver.refresh()
                last_reload = time.time()
            time.sleep(1)

    def find(self, css: str = None, xpath: str = None, timeout: float = 30):
        from selenium.webdriver.common.by import By

        by, value = (By.XPATH, xpath) if xpath else (By.CSS_SELECTOR, css)
        return self.wait_for(f"element {value}", lambda _: next(
            (e for e in self.driver.find_elements(by, value) if e.is_displayed()), None),
            timeout)

    def button(self, label: str, within: str = ""):
        return self.find(xpath=f"{within}//button[normalize-space(.)='{label}']")

    def type_into(self, name: str, value: str) -> None:
        from selenium.webdriver.common.keys import Keys

        field = self.find(css=f"[name='{name}']")
        field.click()
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(value)

    def shot(self, name: str) -> Path:
        path = self.shots / name
        self.driver.save_screenshot(str(path))
        out = os.environ.get("RETRAIN_SCREENSHOT_DIR")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(out) / name)
        return path


def log_in(page: Page, password: str, user: str = "admin") -> None:
    """Through the login form (the root redirects there)."""
    page.open("/")
    page.find(css="input[name='username']").send_keys(user)
    page.find(css="input[name='password']").send_keys(password)
    page.button("Sign in").click()
    page.wait_for("the home page", lambda _: "/auth/login" not in page.driver.current_url)


def open_trigger_form(page: Page, dag_id: str, task: str):
    """The DAG's page, then its Trigger form; returns the form's submit button."""
    page.driver.switch_to.default_content()
    page.open(f"/dags/{dag_id}")
    page.wait_for(f"{dag_id} and its tasks", lambda t: dag_id in t and task in t)
    page.find(css="button[aria-label='Trigger Dag']").click()
    return page.button("Trigger", within="//*[@role='dialog']")


def open_retrain_tab(page: Page, dag_id: str, run_id: str) -> None:
    """The run's page, its "Retrain" tab (retrain.orchestration.airflow_plugin), and into
    the tab's frame: page.text() is then the tab's text."""
    page.driver.switch_to.default_content()
    page.open(f"/dags/{dag_id}/runs/{run_id}")
    page.find(xpath="//a[normalize-space(.)='Retrain']").click()
    page.driver.switch_to.frame(page.find(css="iframe"))


def answer_required_action(page: Page, dag_id: str, run_id: str, option: str, reason: str,
                           shots: tuple[str, str]) -> None:
    """Open Required Actions, find the run's request, answer it with a reason; `shots`:
    the names of the list's and the filled-in request's screenshots."""
    page.driver.switch_to.default_content()
    page.open("/required_actions")
    page.wait_for("the request in Required Actions", lambda t: "approve" in t,
                  reload_every=5)
    page.shot(shots[0])
    page.open(f"/dags/{dag_id}/runs/{run_id}/tasks/approve/required_actions")
    page.wait_for("the approval request with the gate's reasons",
                  lambda t: "Publish this candidate?" in t and "gate" in t.lower(),
                  reload_every=5)
    page.type_into("element_reason", reason)
    page.shot(shots[1])
    page.button(option).click()
