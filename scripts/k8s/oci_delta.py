"""An image from `podman save --format docker-archive` as an OCI archive for `ctr images import`
that carries only the blobs containerd does not hold yet (scripts/k8s-check.sh).

    podman save --format docker-archive IMAGE \\
      | python oci_delta.py HELD_FILE NAME [NAME ...] | ctr -n k8s.io images import -

HELD_FILE lists the digests containerd's content store holds (`ctr content ls -q`), one per
line. Each layer of a new image build that only changed our wheels is one containerd already
has from the last import (the image's dependency layers, 5.9 of its 6.1 GB): those are left
out, so containerd writes and unpacks only the new layers. (Re-importing the whole archive
costs as much as the first import: containerd writes every docker-archive layer to an ingest
file before it can see that it has it.) The OCI index names the image NAME (each NAME, by the
`io.containerd.image.name` annotation `ctr import` reads); its manifest is the Docker v2 one
containerd makes of a docker archive itself, listing every layer, held or not.

podman names each uncompressed layer file of a docker archive `<sha256 of its bytes>.tar` and
the config `<sha256>.json`; the layers this writes are hashed on the way and refused if their
name is not their digest (containerd checks them again on commit). Layers left out are taken
by their names: containerd has them under exactly those digests. Anything but that layout
(a `layer.tar` that is a file, compressed layers) is refused with a message, not guessed at.
Pure standard library; streams (nothing of the archive is held in memory or on disk).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
import tarfile
from typing import IO, Iterable

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
_BLOB = re.compile(r"^([0-9a-f]{64})\.(tar|json)$")
_CHUNK = 1 << 20


class DeltaError(Exception):
    """The archive is not the layout this knows, or a blob is not what its name says."""


class _Hashing:
    """Reads through to `src`, hashing what passes (tarfile.addfile calls only read)."""

    def __init__(self, src: IO[bytes]):
        self._src, self.sha = src, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._src.read(n)
        self.sha.update(data)
        return data


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o444
    out.addfile(info, io.BytesIO(data))


def _blob_name(digest: str) -> str:
    return "blobs/sha256/" + digest.split(":", 1)[1]


def convert(src: IO[bytes], dst: IO[bytes], held: Iterable[str], names: list[str]) -> dict:
    """Writes the OCI archive to `dst`; returns what it did (digests written and left out)."""
    if not names:
        raise DeltaError("no image name given")
    held = set(held)
    sizes: dict[str, int] = {}  # file name in the archive -> size
    written, skipped, written_bytes = [], [], 0
    manifest = None
    with tarfile.open(fileobj=src, mode="r|", bufsize=_CHUNK) as arch, \
            tarfile.open(fileobj=dst, mode="w|", format=tarfile.PAX_FORMAT, bufsize=_CHUNK) as out:
        _add_bytes(out, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        for member in arch:
            name = member.name.removeprefix("./")
            if member.isdir() or member.issym() or member.islnk() or not name:
                continue
            m = _BLOB.match(name)
            if m:
                digest = "sha256:" + m.group(1)
                sizes[name] = member.size
                if digest in held:
                    skipped.append(digest)
                    continue  # the stream mode reads past its data
                info = tarfile.TarInfo(_blob_name(digest))
                info.size, info.mode = member.size, 0o444
                reader = _Hashing(arch.extractfile(member))
                out.addfile(info, reader)
                if "sha256:" + reader.sha.hexdigest() != digest:
                    raise DeltaError(f"{name} is not what its name says "
                                     f"(sha256:{reader.sha.hexdigest()})")
                written.append(digest)
                written_bytes += member.size
            elif name == "manifest.json":
                manifest = json.load(arch.extractfile(member))
            elif name == "repositories" or re.fullmatch(r"[0-9a-f]{64}/(VERSION|json)", name):
                continue  # docker's legacy per-layer metadata: nothing containerd needs
            else:
                raise DeltaError(f"unexpected entry {name!r} (a layer.tar that is a file, "
                                 "a compressed layer?): not podman's docker-archive layout")
        if not manifest or len(manifest) != 1:
            raise DeltaError("the archive's manifest.json must describe exactly one image")
        entry = manifest[0]
        files = [entry["Config"], *entry["Layers"]]
        for f in files:
            if f not in sizes:
                raise DeltaError(f"manifest.json names {f!r}, which the archive does not hold "
                                 "as <sha256>.tar/.json")

        def desc(media: str, f: str) -> dict:
            return {"mediaType": media, "digest": "sha256:" + f.split(".")[0], "size": sizes[f]}

        body = json.dumps({
            "schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
            "config": desc(DOCKER_CONFIG, entry["Config"]),
            "layers": [desc(DOCKER_LAYER, f) for f in entry["Layers"]],
        }, separators=(",", ":")).encode()
        mdigest = "sha256:" + hashlib.sha256(body).hexdigest()
        _add_bytes(out, _blob_name(mdigest), body)
        index = {"schemaVersion": 2, "manifests": [
            {"mediaType": DOCKER_MANIFEST, "digest": mdigest, "size": len(body),
             "annotations": {"io.containerd.image.name": n}} for n in names]}
        _add_bytes(out, "index.json", json.dumps(index, separators=(",", ":")).encode())
    return {"manifest": mdigest, "written": written, "skipped": skipped,
            "written_bytes": written_bytes,
            "layers": ["sha256:" + f.split(".")[0] for f in entry["Layers"]]}


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        held = [line.strip() for line in f if line.strip()]
    try:
        done = convert(sys.stdin.buffer, sys.stdout.buffer, held, argv[2:])
    except (DeltaError, tarfile.TarError, KeyError, ValueError) as e:
        print(f"oci_delta: {e}", file=sys.stderr)
        return 1
    print(f"oci_delta: {len(done['layers'])} layers, {len(done['skipped'])} held by containerd "
          f"and left out, {len(done['written'])} blobs written ({done['written_bytes'] / 1e6:.1f} MB); "
          f"manifest {done['manifest']}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
