"""Resolve a checkpoint reference (local directory or Hugging Face hub id) to a local directory.

A leaf module (no torch, nothing else of orpheus_svc): the LM loader (models/), the SNAC loader
(audio/) and engine_builder all use it.

A reference that names an existing directory is used as is. Anything else is treated as a
hub id ("owner/name" or "owner/name@revision") and resolved through huggingface_hub's
snapshot_download, restricted to the files we read. Offline mode (HF_HUB_OFFLINE=1, or
offline=True) only looks in the local hub cache and fails with a message that says what
is missing and how to provide it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence


class CheckpointNotFoundError(FileNotFoundError):
    """The checkpoint could not be found locally or fetched; the message says what to do."""


def _offline_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def resolve_checkpoint(
    ref: str | os.PathLike[str],
    allow_patterns: Sequence[str],
    *,
    what: str = "checkpoint",
    offline: bool | None = None,
) -> Path:
    """Return a local directory holding the checkpoint `ref`.

    `allow_patterns` restricts a hub download to the files the caller reads (e.g.
    ["config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer.json"]).
    """
    path = Path(os.path.expanduser(str(ref)))
    if path.is_dir():
        return path
    text = str(ref)
    if path.exists():
        raise CheckpointNotFoundError(f"{what} {text!r} is a file; expected a directory in the HF layout")
    looks_local = text.startswith((".", "/", "~")) or text.count("/") != 1
    if looks_local:
        raise CheckpointNotFoundError(
            f"{what} {text!r}: no such directory (and it is not a hub id of the form owner/name)")
    repo_id, _, revision = text.partition("@")
    offline = _offline_env() if offline is None else offline
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a dependency
        raise CheckpointNotFoundError(f"{what} {text!r}: huggingface_hub is not installed") from exc
    try:
        local = snapshot_download(
            repo_id=repo_id,
            revision=revision or None,
            allow_patterns=list(allow_patterns),
            local_files_only=offline,
        )
    except LocalEntryNotFoundError as exc:
        hint = ("offline mode is on (HF_HUB_OFFLINE=1), so only the local hub cache is searched"
                if offline else "the hub could not be reached")
        raise CheckpointNotFoundError(
            f"{what} {text!r} is not in the local hub cache and {hint}. Download it on a machine "
            f"with network access (huggingface-cli download {repo_id}) or pass a local directory."
        ) from exc
    except Exception as exc:  # network, auth, missing repo: all end the same way for the user
        raise CheckpointNotFoundError(
            f"{what} {text!r} could not be fetched from the hub: {exc.__class__.__name__}: {exc}. "
            f"Pass a local directory in the HF layout instead.") from exc
    return Path(local)
