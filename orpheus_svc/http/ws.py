"""WebSocket text streaming (added in the next change)."""

from starlette.websockets import WebSocket


async def stream(websocket: WebSocket) -> None:
    await websocket.close(code=1011)
