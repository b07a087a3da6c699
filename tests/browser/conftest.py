"""The browser tests' Chromium: the system's (Debian's chromium package, or Chrome), never a browser
build downloaded by Playwright. make scoreboard-test installs the package where none is found."""

from __future__ import annotations

import shutil

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    executable = next((p for p in map(shutil.which, BROWSERS) if p), None)
    if executable is None:
        pytest.fail(f"no Chromium on PATH (looked for {', '.join(BROWSERS)}); `make scoreboard-test` installs "
                    "Debian's chromium package, or `apt-get install chromium`")
    return {**browser_type_launch_args, "executable_path": executable}
