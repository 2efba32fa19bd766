"""Playwright against a live server, driving Debian's Chromium (never a downloaded browser)."""

import contextlib
import functools
import os
import shutil
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles.testing import StaticLiveServerTestCase
from playwright.sync_api import expect

# Playwright's sync API keeps an event loop in this thread; the ORM calls tests make for
# their fixtures are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot_on_failure(test):
    """Save a full-page screenshot of `self.page` to test-artifacts/<test>.png when it fails."""

    @functools.wraps(test)
    def wrapped(self, *args, **kwargs):
        try:
            return test(self, *args, **kwargs)
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            # The original failure matters more than a failed screenshot.
            with contextlib.suppress(Exception):
                self.page.screenshot(path=str(ARTIFACTS / f"{test.__name__}.png"), full_page=True)
            raise

    return wrapped


class BrowserLiveTestCase(StaticLiveServerTestCase):
    """One Chromium per test class; a fresh context (cookies, storage) per test."""

    viewport = {"width": 1280, "height": 860}

    @classmethod
    def setUpClass(cls):
        from playwright.sync_api import sync_playwright

        super().setUpClass()
        executable = chromium_path()
        if executable is None:
            raise RuntimeError("Chromium is not installed: apt-get install chromium")
        cls._playwright = sync_playwright().start()
        # launch() starts from a fresh throwaway profile; each test gets its own context.
        cls.browser = cls._playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls._playwright.stop()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.context = self.browser.new_context(viewport=self.viewport)
        # Generous: this 2-core machine runs other test suites at the same time.
        self.context.set_default_timeout(15_000)
        expect.set_options(timeout=15_000)
        self.page = self.context.new_page()

    def tearDown(self):
        self.context.close()
        super().tearDown()

    def log_in(self, username: str, password: str, next_path: str = "/memories/"):
        self.page.goto(f"{self.live_server_url}{next_path}")
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(password)
        self.page.get_by_role("button", name="Log in").click()
        self.page.wait_for_load_state("networkidle")
