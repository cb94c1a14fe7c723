"""The memory console in a real browser: headless Chromium (Debian's ``chromium``
and ``chromium-driver``, installed by scripts/setup.sh) driven by Selenium, against
the real stack (Envoy, the sidecar as a process, the mock LLM). Memories come from
conversations through Envoy; the console is used as an operator would: sign in,
find a user by part of the id, open a user, search, read a memory's history, delete,
forget (confirmed), a scoped token kept to its users, and an injection explained
after a request through Envoy.

``SIDECAR_CONSOLE_SCREENSHOTS=DIR`` keeps a screenshot of each main page in DIR
(how the ones in docs/console/ were made)."""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.stack import Stack, running_stack

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        "Chromium and ChromeDriver are not installed (scripts/setup.sh installs Debian's "
        "chromium and chromium-driver where it can use apt-get)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

ADMIN = "console-e2e-admin-token-0123456789"
SCOPED = "console-e2e-team-token-0123456789"
FORGET = "//button[normalize-space()='Forget this user']"
SHOTS = os.environ.get("SIDECAR_CONSOLE_SCREENSHOTS", "")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    overrides = {
        "admin": {
            "token": ADMIN,
            "tokens": [{"token": SCOPED, "users": ["team-*"], "name": "team"}],
        },
        "defaults": {"injection": {"explain_last": 10}},
    }
    with running_stack(tmp_path_factory.mktemp("console"), config_overrides=overrides) as up:
        yield up


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tmp_path_factory.mktemp("chromium-profile")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shot(browser: WebDriver, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SHOTS) / f"{name}.png"))


def chat(stack: Stack, user: str, text: str) -> dict[str, str]:
    """One turn through Envoy; the response headers (lower-case names)."""
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    request = urllib.request.Request(
        f"{stack.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-user-id": user},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return {k.lower(): v for k, v in response.headers.items()}


def tell(stack: Stack, user: str, *said: str) -> None:
    for text in said:
        before = stack.turns_written()
        chat(stack, user, text)
        assert stack.wait_turns_written(before + 1)


def navigate(browser: WebDriver, element: WebElement, *, submit: bool = False) -> None:
    """Click ``element`` (or submit its form) and wait for the next page."""
    page = browser.find_element(By.TAG_NAME, "html")
    if submit:
        element.submit()
    else:
        element.click()
    # Chrome can answer a question about the old page with an "unhandled inspector
    # error" while that page is being replaced: ask again rather than fail.
    WebDriverWait(browser, 15, ignored_exceptions=(WebDriverException,)).until(
        expected_conditions.staleness_of(page)
    )


def sign_in(browser: WebDriver, stack: Stack, token: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{stack.sidecar_admin_url}/console/")
    assert browser.current_url.endswith("/console/login")  # the login prompt
    field = browser.find_element(By.ID, "token")
    assert field.get_attribute("type") == "password"
    field.send_keys(token)
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "form button[type=submit]"))
    assert browser.current_url.endswith("/console/")
    assert "Signed in" in browser.find_element(By.TAG_NAME, "header").text


def open_user(browser: WebDriver, user: str) -> None:
    field = browser.find_element(By.ID, "user")
    field.send_keys(user)
    navigate(browser, field, submit=True)
    assert browser.current_url.endswith(f"/console/users/{user}")


def main_text(browser: WebDriver) -> str:
    return str(browser.find_element(By.ID, "main").text)


def test_without_a_token_the_console_asks_to_sign_in(browser: WebDriver, stack: Stack) -> None:
    browser.delete_all_cookies()
    browser.get(f"{stack.sidecar_admin_url}/console/users/team-someone")
    assert browser.current_url.endswith("/console/login")
    label = browser.find_element(By.CSS_SELECTOR, "label[for=token]")
    assert "Admin token" in label.text
    shot(browser, "login")
    browser.find_element(By.ID, "token").send_keys("wrong-token")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "form button[type=submit]"))
    assert "not valid" in main_text(browser)


def test_list_search_history_delete_and_forget(browser: WebDriver, stack: Stack) -> None:
    user = f"team-{uuid.uuid4().hex[:6]}"
    tell(
        stack,
        user,
        "I live in Minneapolis, I love being close to the lakes.",
        "My dog absolutely loses it during thunderstorms.",
        "I'm allergic to penicillin.",
        "I finally moved out of Minneapolis into a place in Phoenix last month!",
    )
    sign_in(browser, stack, ADMIN)
    open_user(browser, user)
    listed = main_text(browser)
    assert "Phoenix" in listed
    assert "penicillin" in listed
    shot(browser, "memories")

    search = browser.find_element(By.ID, "f-q")
    search.send_keys("which medicine should I avoid")
    navigate(browser, search, submit=True)
    rows = browser.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert rows
    assert "penicillin" in rows[0].text

    # The new home, its history: the old one superseded by it.
    browser.get(f"{stack.sidecar_admin_url}/console/users/{user}")
    navigate(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "Phoenix"))
    history = browser.find_element(By.CSS_SELECTOR, "ol.history").text
    assert "Minneapolis" in history
    assert "superseded" in history
    shot(browser, "memory")

    # Delete the dog memory.
    browser.get(f"{stack.sidecar_admin_url}/console/users/{user}")
    navigate(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "dog"))
    navigate(
        browser, browser.find_element(By.XPATH, "//button[normalize-space()='Delete this memory']")
    )
    assert "The memory was deleted." in main_text(browser)
    assert "dog" not in main_text(browser)

    # Forget: the confirmation needs the user id typed.
    navigate(browser, browser.find_element(By.LINK_TEXT, "Forget this user"))
    browser.find_element(By.ID, "confirm").send_keys("not-the-user")
    navigate(browser, browser.find_element(By.XPATH, FORGET))
    assert "nothing was deleted" in main_text(browser)
    browser.find_element(By.ID, "confirm").send_keys(user)
    navigate(browser, browser.find_element(By.XPATH, FORGET))
    assert "Forgotten" in main_text(browser)
    browser.get(f"{stack.sidecar_admin_url}/console/users/{user}?status=all")
    assert "Nothing is stored for this user id" in main_text(browser)


def test_a_user_is_found_by_part_of_the_id(browser: WebDriver, stack: Stack) -> None:
    tag = uuid.uuid4().hex[:8]
    user = f"team-{tag}-b2"
    tell(stack, user, "I'm allergic to penicillin.")
    sign_in(browser, stack, ADMIN)
    search = browser.find_element(By.ID, "u-q")  # the start page lists the users
    search.send_keys(tag.upper())  # part of the id, any case
    navigate(browser, search, submit=True)
    assert f"/console/?q={tag.upper()}" in browser.current_url
    rows = browser.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [row.text.split()[:3] for row in rows] == [[user, "1", "1"]]  # active, all
    shot(browser, "users")
    navigate(browser, browser.find_element(By.LINK_TEXT, user))
    assert browser.current_url.endswith(f"/console/users/{user}")
    assert "penicillin" in main_text(browser)
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "header nav a"))  # back: Users
    assert browser.current_url.endswith("/console/")


def test_a_scoped_token_cannot_see_another_user(browser: WebDriver, stack: Stack) -> None:
    outsider = f"bob-{uuid.uuid4().hex[:6]}"
    tell(stack, outsider, "My locker code is 4417.")
    sign_in(browser, stack, SCOPED)
    assert "team-*" in main_text(browser)
    browser.get(f"{stack.sidecar_admin_url}/console/users/{outsider}")
    page = main_text(browser)
    assert "may not see this user" in page
    assert "4417" not in browser.page_source
    browser.get(f"{stack.sidecar_admin_url}/console/users/{outsider}/injections")
    assert "may not see this user" in main_text(browser)


def test_an_injection_is_explained_after_a_request_through_envoy(
    browser: WebDriver, stack: Stack
) -> None:
    user = f"team-{uuid.uuid4().hex[:6]}"
    tell(stack, user, "I'm allergic to shellfish.", "My sister is Ana.")
    headers = chat(stack, user, "Which foods should I avoid?")
    assert int(headers["x-memory-injected"]) >= 1
    request_id = headers["x-memory-request-id"]
    sign_in(browser, stack, ADMIN)
    browser.get(f"{stack.sidecar_admin_url}/console/users/{user}/injections")
    navigate(browser, browser.find_element(By.LINK_TEXT, request_id))
    page = main_text(browser)
    assert "Which foods should I avoid?" in page
    rows = browser.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert "shellfish" in rows[0].text
    assert "cosine" in rows[0].text  # the signal that gave the score
    shot(browser, "injection")
