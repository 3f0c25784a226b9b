"""The playground page in a real headless Chromium: it loads, speaks, and hears audio."""

import json
import os
from pathlib import Path

import pytest

from .cdp import Browser

DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "playground.png"


@pytest.fixture
def browser():
    b = Browser()
    try:
        yield b
    finally:
        b.close()


@pytest.mark.parametrize("fmt", ["pcm16", "mp3"])
def test_playground_streams_speech_over_the_websocket(server, browser, tmp_path, fmt):
    browser.navigate(server.http + "/")
    assert browser.wait_for("document.getElementById('voice').options.length") == 8
    browser.evaluate(f"document.getElementById('format').value = '{fmt}'")
    browser.evaluate("document.getElementById('text').value = 'Hi there! A short one. Bye now.'")
    browser.evaluate("document.getElementById('speak').click()", gesture=True)
    browser.wait_for("window.playground.done")
    page = json.loads(browser.evaluate(
        "JSON.stringify({bytes: playground.bytes, first: playground.first, error: playground.error,"
        " segments: playground.segments, summary: playground.summary,"
        " rows: document.querySelectorAll('#timeline .seg.done').length,"
        " ttfb: document.getElementById('ttfb').textContent})"))
    assert page["error"] is None
    summary = page["summary"]
    assert summary and summary["num_segments"] == 3 == page["segments"] == page["rows"]
    assert page["first"] > 0 and page["ttfb"].endswith(" ms")
    if fmt == "pcm16":
        assert page["bytes"] == 2 * summary["num_samples"]  # every audio byte reached the page
    else:  # the compressed stream is decoded by the browser's own decoder once complete
        assert page["bytes"] > 0
        assert browser.wait_for("document.getElementById('download').hidden === false")
        duration = browser.wait_for("parseFloat(document.getElementById('audio').textContent)")
        assert abs(duration - summary["num_samples"] / 24000) < 0.2  # LAME's delay and padding
    assert browser.errors() == []
    shot = browser.screenshot()
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / f"playground-{fmt}.png").write_bytes(shot)
    if fmt == "pcm16" and os.environ.get("ORPHEUS_UPDATE_SCREENSHOT"):
        DOCS_SCREENSHOT.write_bytes(shot)
