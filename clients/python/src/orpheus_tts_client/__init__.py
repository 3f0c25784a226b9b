"""orpheus-tts-client (work in progress)."""
