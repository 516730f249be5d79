"""The `app` fixture: the app driven in-process by Streamlit's testing API (no browser)."""

from __future__ import annotations

import pytest

from tests.app.apptest import MAIN, TIMEOUT_S


@pytest.fixture
def app():
    """The app at its first page (Scenario), run once."""
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(MAIN), default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception
    return at
