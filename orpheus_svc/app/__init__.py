"""The composition roots: what assembles the layers below into a running program, and
nothing else imports (docs/architecture.md, "Layers").

    server.py    one gRPC (and HTTP) server process over a Runtime, or a split topology's
                 front-end over the engine process
    topology.py  server.topology: split, the supervisor of the engine process and the
                 front-ends
    cli.py       `orpheus-svc`: serve (either), synth, config
"""
