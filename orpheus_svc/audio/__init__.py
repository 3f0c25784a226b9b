"""SNAC codec and streaming flusher.

    settings.py  FlusherSettings (pure data, part of the Config tree; no torch)
    windows.py   sample-window arithmetic of the flusher (pure integers)
    codec.py     load_snac, write_random_snac, SnacCodec (torch)
    flusher.py   Flusher: frames in, AudioEvents out, on its own thread (torch)

Nothing is imported here, so that the Config tree can import settings without torch.
"""
