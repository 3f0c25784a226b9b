"""The split process topology (server.topology: split): one engine process, N gRPC
front-ends, ZeroMQ with msgpack between them. wire.py: the messages (pure); engine.py: the
engine process's side; frontend.py: a front-end's side; topology.py: the processes."""
