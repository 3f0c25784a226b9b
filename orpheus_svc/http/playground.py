"""GET /: the playground page (static HTML + JS shipped in the package)."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

_PAGE = Path(__file__).with_name("playground.html")


async def page(request: Request) -> Response:
    return HTMLResponse(_PAGE.read_text(encoding="utf-8"))
