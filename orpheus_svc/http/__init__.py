"""The HTTP edge: an OpenAI-shaped speech API, WebSocket text streaming and a playground page.

It runs in the gRPC server's process and event loop, over the same Runtime (one scheduler,
one slot pool), through the same StreamSession and the same request validation as the gRPC
servicer; only the wire format differs. `HttpServer` (server.py) is started and stopped by
app/server.py when `server.http_port` is set. docs/http.md describes the API.
"""
