"""scripts/k8s/oci_delta.py: podman's docker archive as an OCI archive for `ctr images import`
that leaves out the layers containerd already holds (scripts/k8s-check.sh imports a rebuilt
image that way). The archives here are made as podman writes them (checked against podman
4.3's output: `<sha256>.tar` layers, `<sha256>.json` config, legacy `<id>/layer.tar`
symlinks, manifest.json last); the real import into containerd is the Kubernetes check's."""

import hashlib
import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("oci_delta", ROOT / "scripts" / "k8s" / "oci_delta.py")
oci_delta = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oci_delta)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def podman_archive(layers: list[bytes], config: bytes = b'{"architecture":"amd64","os":"linux"}',
                   rename: dict | None = None, extra: list[tuple[str, bytes]] = ()) -> bytes:
    """A docker archive in podman's layout; `rename` maps a layer's true digest to the name
    it is stored under (a lying archive)."""
    rename = rename or {}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))

        names = []
        for data in layers:
            name = rename.get(sha(data), sha(data)) + ".tar"
            add(name, data)
            names.append(name)
        add(sha(config) + ".json", config)
        for i, name in enumerate(names):  # docker's legacy per-layer directories
            legacy = sha(name.encode() + bytes([i]))
            link = tarfile.TarInfo(f"{legacy}/layer.tar")
            link.type, link.linkname = tarfile.SYMTYPE, f"../{name}"
            t.addfile(link)
            add(f"{legacy}/VERSION", b"1.0")
            add(f"{legacy}/json", b"{}")
        for name, data in extra:
            add(name, data)
        add("manifest.json", json.dumps([{"Config": sha(config) + ".json",
                                          "RepoTags": ["localhost/x:1"], "Layers": names}]).encode())
        add("repositories", b"{}")
    return buf.getvalue()


def convert(archive: bytes, held=(), names=("localhost/orpheus-svc:1", "docker.io/library/orpheus-svc:1")):
    out = io.BytesIO()
    done = oci_delta.convert(io.BytesIO(archive), out, held, list(names))
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as t:
        files = {m.name: t.extractfile(m).read() for m in t if m.isfile()}
    return done, files


LAYERS = [b"base layer " * 1000, b"torch layer " * 5000, b"our wheels " * 10]
CONFIG = b'{"architecture":"amd64","os":"linux","rootfs":{}}'


def test_nothing_held_writes_every_blob_and_a_manifest_listing_every_layer_in_order():
    done, files = convert(podman_archive(LAYERS, CONFIG))
    blobs = {n.split("/")[-1]: d for n, d in files.items() if n.startswith("blobs/sha256/")}
    for data in [*LAYERS, CONFIG]:
        assert blobs[sha(data)] == data
    index = json.loads(files["index.json"])
    assert [m["annotations"]["io.containerd.image.name"] for m in index["manifests"]] == \
        ["localhost/orpheus-svc:1", "docker.io/library/orpheus-svc:1"]
    (mdigest,) = {m["digest"] for m in index["manifests"]}
    body = blobs[mdigest.split(":")[1]]
    assert mdigest == "sha256:" + sha(body) == done["manifest"]
    assert all(m["size"] == len(body) for m in index["manifests"])
    manifest = json.loads(body)
    assert manifest["mediaType"] == index["manifests"][0]["mediaType"] == oci_delta.DOCKER_MANIFEST
    assert manifest["config"] == {"mediaType": oci_delta.DOCKER_CONFIG,
                                  "digest": "sha256:" + sha(CONFIG), "size": len(CONFIG)}
    assert manifest["layers"] == [{"mediaType": oci_delta.DOCKER_LAYER, "digest": "sha256:" + sha(d),
                                   "size": len(d)} for d in LAYERS]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    assert set(files) == {"oci-layout", "index.json", *(f"blobs/sha256/{sha(d)}" for d in
                                                        [*LAYERS, CONFIG, body])}


def test_held_layers_are_left_out_but_still_listed():
    held = ["sha256:" + sha(LAYERS[0]), "sha256:" + sha(LAYERS[1]), "sha256:" + "0" * 64]
    done, files = convert(podman_archive(LAYERS, CONFIG), held=held)
    assert f"blobs/sha256/{sha(LAYERS[0])}" not in files
    assert f"blobs/sha256/{sha(LAYERS[1])}" not in files
    assert files[f"blobs/sha256/{sha(LAYERS[2])}"] == LAYERS[2]
    assert done["skipped"] == held[:2]
    assert done["written"] == ["sha256:" + sha(LAYERS[2]), "sha256:" + sha(CONFIG)]
    assert done["written_bytes"] == len(LAYERS[2]) + len(CONFIG)
    manifest = json.loads(files["blobs/sha256/" + done["manifest"].split(":")[1]])
    assert [layer["digest"] for layer in manifest["layers"]] == ["sha256:" + sha(d) for d in LAYERS]
    assert [layer["size"] for layer in manifest["layers"]] == [len(d) for d in LAYERS]


def test_the_same_image_gives_the_same_manifest_whatever_is_held():
    a, _ = convert(podman_archive(LAYERS, CONFIG))
    b, _ = convert(podman_archive(LAYERS, CONFIG), held=["sha256:" + sha(d) for d in LAYERS])
    assert a["manifest"] == b["manifest"]


def test_a_layer_written_under_a_digest_that_is_not_its_own_is_refused():
    lie = {sha(LAYERS[2]): sha(b"something else")}
    with pytest.raises(oci_delta.DeltaError, match="not what its name says"):
        convert(podman_archive(LAYERS, CONFIG, rename=lie))


@pytest.mark.parametrize("extra", [("abc/layer.tar", b"a real file"), ("layer.tar.gz", b"x")])
def test_a_layout_other_than_podmans_is_refused_not_guessed(extra):
    with pytest.raises(oci_delta.DeltaError, match="unexpected entry"):
        convert(podman_archive(LAYERS, CONFIG, extra=[extra]))


def test_a_manifest_naming_a_file_the_archive_lacks_is_refused():
    archive = podman_archive(LAYERS, CONFIG)
    # drop the last layer's file: the manifest still names it
    src = tarfile.open(fileobj=io.BytesIO(archive))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for m in src:
            if m.name != sha(LAYERS[2]) + ".tar":
                t.addfile(m, src.extractfile(m) if m.isfile() else None)
    with pytest.raises(oci_delta.DeltaError, match="does not hold"):
        convert(buf.getvalue())


def test_the_command_line_reads_held_digests_and_reports(tmp_path, capsys, monkeypatch):
    held = tmp_path / "held"
    held.write_text(f"sha256:{sha(LAYERS[1])}\n\n")
    out = io.BytesIO()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(podman_archive(LAYERS, CONFIG))))
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(out))
    assert oci_delta.main(["oci_delta.py", str(held), "localhost/a:1"]) == 0
    assert "3 layers, 1 held by containerd and left out, 3 blobs written" in capsys.readouterr().err
    assert oci_delta.main(["oci_delta.py", str(held)]) == 2
