"""SNAC codec and streaming flusher.

    settings.py  FlusherSettings (pure data, part of the Config tree; no torch)
    windows.py   sample-window arithmetic of the flusher (pure integers)
    calls.py     which windows share a SNAC call (pure planning)
    codec.py     load_snac, write_random_snac, SnacCodec (torch)
    streams.py   the flusher's per-generation streams and which are due when (no torch)
    decoder.py   Decoder: planned windows and codes to exact PCM samples (torch, no thread)
    flusher.py   Flusher: frames in, AudioEvents out, on its own thread (torch)

Nothing is imported here, so that the Config tree can import settings without torch.
"""
