"""orpheus-svc: a gRPC-first streaming text-to-speech service for Orpheus TTS.

`__version__` is the one place the server distribution's version is written: pyproject.toml
reads it (`[tool.setuptools.dynamic]`), `orpheus-svc --version` prints it, the server logs it
at start and `GetStatus` reports it. CHANGELOG.md says what each version changed and how
versions relate to the API package (orpheus.tts.v1).
"""

__version__ = "0.1.0"
