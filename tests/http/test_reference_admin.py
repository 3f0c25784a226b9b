"""Reference voices loaded and unloaded while serving through the admin service
(orpheus.admin.v1 LoadReferenceVoice, ListReferenceVoices, UnloadReferenceVoice; docs/voices.md)
on a real server (sim backend, a tiny random SNAC to encode clips): a voice loaded from a
path inside model.reference_dirs or from bytes is listed at once (ListVoices, /v1/audio/voices)
and spoken in its own prompt layout; every refusal answers a clear status naming the request
field, and leaves the voice list, the reference voices and the adapter pool as they were; an
unload lets the session open on the voice finish in that voice."""

import json
import subprocess

import grpc
import httpx
import numpy as np
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from orpheus_svc.audio.codec import SNAC_24KHZ_CONFIG, write_random_snac
from orpheus_svc.core.reference import (
    MAX_CLIP_AUDIO_BYTES,
    build_reference_prompt,
    reference_prefix,
)
from orpheus_svc.core.status import Status
from orpheus_svc.proto.admin.v1 import admin_pb2 as apb
from orpheus_svc.runtime import FrontRuntime
from orpheus_svc.server.reference_admin import ReferenceAdmin
from orpheus_svc.server.adapter_admin import AdminError

from ..audio.clip_helpers import encode_clip, sweep
from .inproc import InProcessServer
from .test_admin_service import (
    ADMIN_KEY,
    GRPCURL,
    USER_KEY,
    OpenSession,
    admin,
    code_of,
    keys_doc,
    listing,
    md,
    peft_dir,
    synthesize,
    tts,
)

TINY = {**SNAC_24KHZ_CONFIG, "encoder_dim": 4, "decoder_dim": 64}
RATE = 16000  # clips at 16 kHz: small files, resampled to 24 kHz like any other


@pytest.fixture(scope="module")
def ref_admin_server(tmp_path_factory):
    """Sim backend, one adapter slot, model.reference_dirs, a start-up reference voice."""
    root = tmp_path_factory.mktemp("refadmin")
    snac = write_random_snac(root / "snac", seed=3, config=TINY)
    clips = root / "clips"
    clips.mkdir()
    (clips / "rise.wav").write_bytes(encode_clip(sweep(1.5, RATE), RATE, "wav"))
    (clips / "fall.flac").write_bytes(encode_clip(sweep(1.2, RATE, f0=1500, f1=300), RATE,
                                                  "flac"))
    (root / "private.wav").write_bytes(encode_clip(sweep(1.5, RATE), RATE, "wav"))
    (clips / "escape.wav").symlink_to(root / "private.wav")
    (root / "startup.wav").write_bytes(encode_clip(sweep(1.3, RATE), RATE, "wav"))
    adapters = root / "adapters"
    peft_dir(adapters / "nova", "nova")
    peft_dir(adapters / "clash", "Rise")  # an adapter whose voice a reference voice takes
    srv = InProcessServer(**{
        "engine.backend": "sim", "engine.max_sessions": 6, "engine.max_seq_len": 2048,
        "engine.max_adapters": 1, "engine.max_lora_rank": 8,
        "model.adapter_dirs": [str(adapters)], "model.reference_dirs": [str(clips)],
        "model.snac": str(snac),
        "model.reference_voices": [{"name": "startup", "clip": str(root / "startup.wav"),
                                    "transcript": "The start-up voice."}],
        "server.api_keys": keys_doc(("ops", ADMIN_KEY, ["admin"]), ("app", USER_KEY, None)),
    }).start()
    srv.root, srv.clips, srv.adapters, srv.snac = root, clips, adapters, str(snac)
    try:
        yield srv
    finally:
        srv.stop()


def load_ref(srv, name, transcript="Words the clip says.", language="", **clip):
    return admin(srv).LoadReferenceVoice(
        apb.LoadReferenceVoiceRequest(name=name, transcript=transcript, language=language,
                                      **clip), metadata=md(ADMIN_KEY), timeout=60)


def unload_ref(srv, name):
    return admin(srv).UnloadReferenceVoice(apb.UnloadReferenceVoiceRequest(name=name),
                                           metadata=md(ADMIN_KEY), timeout=10)


def references(srv):
    return admin(srv).ListReferenceVoices(apb.ListReferenceVoicesRequest(),
                                          metadata=md(ADMIN_KEY), timeout=10)


def grpc_voices(srv):
    reply = tts(srv).ListVoices(pb.ListVoicesRequest(), metadata=md(USER_KEY), timeout=10)
    return [(v.name, v.reference, v.adapter) for v in reply.voices]


def http_voices(srv):
    r = httpx.get(f"{srv.http}/v1/audio/voices", headers={"Authorization": f"Bearer {USER_KEY}"},
                  timeout=10)
    assert r.status_code == 200
    return r.json()


def speech(srv, voice):
    return httpx.post(f"{srv.http}/v1/audio/speech", timeout=60,
                      headers={"Authorization": f"Bearer {USER_KEY}"},
                      json={"model": "tts-1", "input": "Hi.", "voice": voice,
                            "response_format": "pcm"})


def snapshot(srv):
    """Everything a refusal must leave as it was: the voice list on both edges, the
    reference voices, the adapter pool."""
    return (grpc_voices(srv), http_voices(srv), references(srv).SerializeToString(),
            listing(srv).SerializeToString())


@pytest.fixture
def opened(monkeypatch):
    seen = []
    real_open = FrontRuntime.open

    def spy(self, request, *args, **kwargs):
        seen.append(request)
        return real_open(self, request, *args, **kwargs)

    monkeypatch.setattr(FrontRuntime, "open", spy)
    return seen


def test_load_by_path_and_by_bytes_lists_and_speaks_the_voice_at_once(ref_admin_server, opened):
    srv = ref_admin_server
    runtime = srv.server.state.runtime
    found = references(srv)
    assert [v.name for v in found.voices] == ["startup"]
    assert (list(found.reference_dirs), found.max_clip_seconds, found.min_clip_seconds,
            found.max_transcript_chars, found.max_clip_audio_bytes) == \
        ([str(srv.clips)], 30.0, 1.0, 1000, MAX_CLIP_AUDIO_BYTES)

    rise = load_ref(srv, "Rise", "A rising tone.", clip_path=str(srv.clips / "rise.wav")).voice
    assert (rise.name, rise.language, rise.transcript, rise.clip, rise.state) == \
        ("Rise", "en", "A rising tone.", str((srv.clips / "rise.wav").resolve()),
         apb.REFERENCE_VOICE_STATE_LOADED)
    assert rise.audio_tokens == 7 * 18 and rise.seconds == pytest.approx(18 * 2048 / 24000)
    fall = load_ref(srv, "fall", "A falling tone.", "en-GB",
                    clip_audio=(srv.clips / "fall.flac").read_bytes()).voice
    assert (fall.clip, fall.language, fall.audio_tokens) == ("", "en-GB", 7 * 15)
    assert [v.name for v in references(srv).voices] == ["startup", "Rise", "fall"]
    assert ("Rise", True, "") in grpc_voices(srv) and ("fall", True, "") in grpc_voices(srv)
    data = {v["name"]: v for v in http_voices(srv)["data"]}
    assert data["Rise"]["reference"] is True and data["fall"]["language"] == "en-GB"

    assert synthesize(srv, "rise").audio_ms > 0  # any case, as every voice
    # the engine's prefix pool holds each voice's prefix from its load on
    pool = runtime.engine.backend
    for name in ("startup", "Rise", "fall"):
        assert pool.holds_prefix(tuple(reference_prefix(runtime.encode,
                                                        runtime.references[name.casefold()])))
    assert speech(srv, "fall").status_code == 200
    ref = runtime.references["rise"]
    assert rise.prefix_tokens == len(reference_prefix(runtime.encode, ref))
    assert [r.prompt_ids for r in opened] == [
        tuple(build_reference_prompt(runtime.encode, ref, "Hi there.")),
        tuple(build_reference_prompt(runtime.encode, runtime.references["fall"], "Hi."))]
    assert unload_ref(srv, "RISE").freed and unload_ref(srv, "fall").freed
    assert [v.name for v in references(srv).voices] == ["startup"]
    assert "Rise" not in {n for n, _, _ in grpc_voices(srv)}
    assert speech(srv, "rise").status_code == 400


def _silence() -> bytes:
    return encode_clip(np.zeros(2 * RATE, np.float32), RATE, "wav")


def _too_long() -> bytes:
    return encode_clip(sweep(31.0, 8000), 8000, "wav")


REFUSALS = [
    # (what, request fields, status, the field the message names, what it says)
    ("empty audio", dict(clip_audio=b""), Status.INVALID_ARGUMENT, "clip_audio", "empty"),
    ("unreadable audio", dict(clip_audio=b"not audio at all " * 64), Status.INVALID_ARGUMENT,
     "clip_audio", "cannot decode"),
    ("silence", dict(clip_audio=_silence()), Status.INVALID_ARGUMENT, "clip_audio", "silent"),
    ("over the length limit", dict(clip_audio=_too_long()), Status.INVALID_ARGUMENT,
     "clip_audio", "longer than 30 s"),
    ("too short", dict(clip_audio=encode_clip(sweep(0.5, RATE), RATE, "wav")),
     Status.INVALID_ARGUMENT, "clip_audio", "at least 1 s"),
    ("bytes over the bound", dict(clip_audio=b"\0" * (MAX_CLIP_AUDIO_BYTES + 1)),
     Status.INVALID_ARGUMENT, "clip_audio", f"at most {MAX_CLIP_AUDIO_BYTES}"),
    ("no clip", dict(), Status.INVALID_ARGUMENT, "clip_path or clip_audio", "missing"),
    ("transcript missing", dict(transcript="  ", clip_path="rise.wav"), Status.INVALID_ARGUMENT,
     "transcript", "missing"),
    ("transcript over its limit", dict(transcript="word " * 201, clip_path="rise.wav"),
     Status.INVALID_ARGUMENT, "transcript", "at most 1000"),
    ("a name that is no name", dict(name="a/b", clip_path="rise.wav"), Status.INVALID_ARGUMENT,
     "name", "letters, digits"),
    ("a bad language", dict(language="english!", clip_path="rise.wav"),
     Status.INVALID_ARGUMENT, "language", "BCP 47"),
    ("a base voice's name", dict(name="TARA", clip_path="rise.wav"), Status.ALREADY_EXISTS,
     "name", "a voice of the base model"),
    ("an adapter voice's name", dict(name="Nova", clip_path="rise.wav"), Status.ALREADY_EXISTS,
     "name", "a voice of adapter 'nova-lora'"),
    ("a taken name, before the clip is read", dict(name="Tara", clip_audio=b"junk"),
     Status.ALREADY_EXISTS, "name", "a voice of the base model"),
    ("a reference voice's name", dict(name="STARTUP", clip_path="rise.wav"),
     Status.ALREADY_EXISTS, "name", "a reference voice"),
    ("a path outside (symlink)", dict(clip_path="escape.wav"), Status.PERMISSION_DENIED,
     "clip_path", "outside model.reference_dirs"),
    ("a path outside (..)", dict(clip_path="../private.wav"), Status.PERMISSION_DENIED,
     "clip_path", "outside model.reference_dirs"),
    ("a relative path", dict(clip_path="./rise.wav", relative=True), Status.INVALID_ARGUMENT,
     "clip_path", "not absolute"),
    ("a missing file", dict(clip_path="nothing.wav"), Status.INVALID_ARGUMENT, "clip_path",
     "cannot read"),
]


def test_every_bad_input_is_refused_naming_its_field_and_changes_nothing(ref_admin_server):
    srv = ref_admin_server
    load_adapter = admin(srv).LoadAdapter(apb.LoadAdapterRequest(
        name="nova-lora", path=str(srv.adapters / "nova")), metadata=md(ADMIN_KEY), timeout=30)
    assert load_adapter.adapter.state == apb.ADAPTER_STATE_LOADED
    try:
        before = snapshot(srv)
        for what, fields, status, field, says in REFUSALS:
            fields = dict(fields)
            name = fields.pop("name", "newvoice")
            if "clip_path" in fields and not fields.pop("relative", False):
                fields["clip_path"] = str(srv.clips / fields["clip_path"])
            code, details = code_of(load_ref, srv, name, fields.pop("transcript", "Some words."),
                                    fields.pop("language", ""), **fields)
            assert code == getattr(grpc.StatusCode, status.name), (what, details)
            assert details.startswith(f"{field}: ") and says in details, (what, details)
            assert snapshot(srv) == before, what
            r = speech(srv, name)  # the HTTP edge: no such voice to speak
            if name.casefold() not in {"tara", "nova", "startup"}:
                assert r.status_code == 400 and r.json()["error"]["param"] == "voice", what
        # the adapter side of one name for one voice: an adapter may not take a reference
        # voice's name either (the pool and the voice list stay as they were)
        load_ref(srv, "Rise", clip_path=str(srv.clips / "rise.wav"))
        assert admin(srv).UnloadAdapter(apb.UnloadAdapterRequest(name="nova-lora"),
                                        metadata=md(ADMIN_KEY), timeout=10).freed
        before = snapshot(srv)
        code, details = code_of(admin(srv).LoadAdapter, apb.LoadAdapterRequest(
            name="clash", path=str(srv.adapters / "clash")), metadata=md(ADMIN_KEY), timeout=30)
        assert code == grpc.StatusCode.ALREADY_EXISTS and "'Rise'" in details, details
        assert "a reference voice" in details
        assert snapshot(srv) == before
        assert srv.server.state.runtime.engine.backend.pool == {}
    finally:
        for name in ("nova-lora",):
            try:
                admin(srv).UnloadAdapter(apb.UnloadAdapterRequest(name=name),
                                         metadata=md(ADMIN_KEY), timeout=10)
            except grpc.RpcError:
                pass
        try:
            unload_ref(srv, "Rise")
        except grpc.RpcError:
            pass


def test_unload_lets_the_open_session_finish_in_its_voice(ref_admin_server, opened):
    srv = ref_admin_server
    runtime = srv.server.state.runtime
    load_ref(srv, "kai", "A rising tone.", clip_path=str(srv.clips / "rise.wav"))
    kai = runtime.references["kai"]
    session = OpenSession(srv, "kai")
    session.say("First part.")
    session.until_segment_end(0)
    (entry,) = [v for v in references(srv).voices if v.name == "kai"]
    assert entry.open_sessions == 1

    gone = unload_ref(srv, "kai")
    assert not gone.freed and gone.voice.state == apb.REFERENCE_VOICE_STATE_DRAINING
    assert gone.voice.open_sessions == 1
    assert "kai" not in {n for n, _, _ in grpc_voices(srv)}
    assert "kai" not in http_voices(srv)["voices"]
    code, details = code_of(synthesize, srv, "kai")
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "being unloaded" in details
    r = speech(srv, "kai")
    assert r.status_code == 400 and "being unloaded" in r.json()["error"]["message"]
    code, details = code_of(unload_ref, srv, "kai")
    assert code == grpc.StatusCode.NOT_FOUND and "already being unloaded" in details
    # the name is free again at once: a new clip under it, while the old one drains
    load_ref(srv, "kai", "A falling tone.", clip_audio=(srv.clips / "fall.flac").read_bytes())
    assert runtime.references["kai"] != kai

    session.say("Second part, after the unload.")
    replies = session.end()
    ends = [r.segment_end for r in replies if r.HasField("segment_end")]
    assert len(ends) == 2 and replies[-1].summary.num_samples > 0
    # both segments of the open session were spoken in the voice it started on
    mine = [r for r in opened if r.session_id == opened[0].session_id]
    assert [r.prompt_ids for r in mine] == [
        tuple(build_reference_prompt(runtime.encode, kai, t))
        for t in ("First part.", "Second part, after the unload.")]
    assert [(v.name, v.transcript) for v in references(srv).voices
            if v.name == "kai"] == [("kai", "A falling tone.")]  # the old one released
    pool = runtime.engine.backend
    new_kai = runtime.references["kai"]
    assert not pool.holds_prefix(tuple(reference_prefix(runtime.encode, kai)))
    assert unload_ref(srv, "kai").freed
    assert _eventually(lambda: not pool.holds_prefix(
        tuple(reference_prefix(runtime.encode, new_kai))))


def _eventually(check, timeout=10.0):
    """The pool is let go on the engine thread, after the unload's answer."""
    import time
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_a_full_prefix_pool_refuses_a_voice_and_changes_nothing(ref_admin_server):
    # a server whose pool (1 MB: 9 tokens of Orpheus-3B's KV on the sim) holds no prefix
    srv = ref_admin_server
    small = InProcessServer(**{
        "engine.backend": "sim", "engine.max_sessions": 2, "engine.max_seq_len": 2048,
        "engine.prefix_pool_mb": 1, "model.reference_dirs": [str(srv.clips)],
        "model.snac": srv.snac,
        "server.api_keys": keys_doc(("ops", ADMIN_KEY, ["admin"]), ("app", USER_KEY, None)),
    }).start()
    try:
        before = (grpc_voices(small), references(small).SerializeToString())
        code, details = code_of(load_ref, small, "big", "A rising tone.",
                                clip_path=str(srv.clips / "rise.wav"))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "engine.prefix_pool_mb 1" in details and "no room" in details, details
        assert (grpc_voices(small), references(small).SerializeToString()) == before
        assert len(small.server.state.runtime.engine.backend.prefixes) == 0
    finally:
        small.stop()


def test_the_split_topology_refuses_every_reference_voice_call(ref_admin_server):
    split = ReferenceAdmin(ref_admin_server.server.state, split=True)
    for call in (split.listing, lambda: split.unload("startup")):
        with pytest.raises(AdminError) as err:
            call()
        assert err.value.code == Status.UNIMPLEMENTED
        assert "server.topology split" in err.value.message


def test_grpcurl_loads_one_as_the_docs_show(ref_admin_server):
    if not GRPCURL.exists():
        pytest.skip("grpcurl not installed (scripts/install-tools.sh)")
    srv = ref_admin_server
    base = [str(GRPCURL), "-plaintext", "-H", f"authorization: Bearer {ADMIN_KEY}"]
    body = {"name": "grace", "language": "en", "transcript": "A rising tone.",
            "clip_path": str(srv.clips / "rise.wav")}
    out = subprocess.run(base + ["-d", json.dumps(body), srv.addr,
                                 "orpheus.admin.v1.AdminService/LoadReferenceVoice"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    voice = json.loads(out.stdout)["voice"]
    assert (voice["name"], voice["state"], voice["audio_tokens"]) == \
        ("grace", "REFERENCE_VOICE_STATE_LOADED", 126)
    assert ("grace", True, "") in grpc_voices(srv)
    out = subprocess.run(base + ["-d", '{"name": "grace"}', srv.addr,
                                 "orpheus.admin.v1.AdminService/UnloadReferenceVoice"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and json.loads(out.stdout)["freed"] is True, out.stderr
