"""The admin service (orpheus.admin.v1, docs/lora.md) on a real server (sim backend: no model
compute), through gRPC, the HTTP edge and grpcurl: who may call it, load / use / unload /
reload while another session runs, a draining adapter's voice refused while the session
open on it finishes with all its audio, and its pool slot freed only after that session.

The adapters are PEFT-format directories written here (the sim checks no shapes against a
base model; tests/engine/test_adapter_loading.py loads real peft-made ones on the torch
backend)."""

import json
import queue
import subprocess
from pathlib import Path

import grpc
import httpx
import pytest
import torch
from grpc_reflection.v1alpha import reflection_pb2
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc
from safetensors.torch import save_file

from orpheus_svc.core.status import Status
from orpheus_svc.proto.admin.v1 import admin_pb2 as apb
from orpheus_svc.proto.admin.v1 import admin_pb2_grpc
from orpheus_svc.security.keys import hash_key
from orpheus_svc.server.adapter_admin import AdapterAdmin, AdminError

from .inproc import InProcessServer

ADMIN_KEY, USER_KEY = "ok_admin-key", "ok_user-key"
GRPCURL = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "grpcurl"


def keys_doc(*entries) -> str:
    return json.dumps({"keys": [{"name": n, "sha256": hash_key(k), **({"scopes": s} if s else {})}
                                for n, k, s in entries]})


def peft_dir(path: Path, voice: str, r: int = 4) -> Path:
    """An adapter directory as PEFT's save_pretrained lays it out (r, alpha, q/v of two
    layers), with a voices.json naming `voice`."""
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": r, "lora_alpha": 2 * r, "bias": "none",
        "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}))
    g = torch.Generator().manual_seed(r)
    tensors = {f"base_model.model.model.layers.{i}.self_attn.{m}.lora_{ab}.weight":
               torch.randn((r, 64) if ab == "A" else (64, r), generator=g)
               for i in range(2) for m in ("q_proj", "v_proj") for ab in "AB"}
    save_file(tensors, str(path / "adapter_model.safetensors"))
    (path / "voices.json").write_text(json.dumps({"voices": [voice]}))
    return path


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    allowed = root / "allowed"
    peft_dir(allowed / "nova", "nova")
    peft_dir(allowed / "orion", "orion", r=8)
    peft_dir(root / "outside", "stray")
    (allowed / "escape").symlink_to(root / "outside")
    return allowed


@pytest.fixture(scope="module")
def admin_server(adapters):
    """Sim backend, a pool of ONE adapter slot, an admin key and an ordinary key."""
    srv = InProcessServer(**{
        "engine.backend": "sim", "engine.max_sessions": 6, "engine.max_adapters": 1,
        "engine.max_lora_rank": 8, "model.adapter_dirs": [str(adapters)],
        "server.api_keys": keys_doc(("ops", ADMIN_KEY, ["admin"]), ("app", USER_KEY, None)),
    }).start()
    try:
        yield srv
    finally:
        srv.stop()


def md(key):
    return (("authorization", f"Bearer {key}"),)


def admin(srv):
    return admin_pb2_grpc.AdminServiceStub(srv.channel)


def tts(srv):
    return tts_pb2_grpc.TTSServiceStub(srv.channel)


def code_of(call, *args, **kw):
    with pytest.raises(grpc.RpcError) as err:
        call(*args, **kw)
    return err.value.code(), err.value.details()


def listing(srv):
    return admin(srv).ListAdapters(apb.ListAdaptersRequest(), metadata=md(ADMIN_KEY), timeout=10)


def voices(srv):
    reply = tts(srv).ListVoices(pb.ListVoicesRequest(), metadata=md(USER_KEY), timeout=10)
    return {v.name: v.adapter for v in reply.voices}


def load(srv, name, path, key=ADMIN_KEY, **kw):
    return admin(srv).LoadAdapter(apb.LoadAdapterRequest(name=name, path=str(path), **kw),
                                  metadata=md(key), timeout=30)


def unload(srv, name):
    return admin(srv).UnloadAdapter(apb.UnloadAdapterRequest(name=name), metadata=md(ADMIN_KEY),
                                    timeout=10)


def synthesize(srv, voice, key=USER_KEY):
    replies = list(tts(srv).Synthesize(pb.SynthesizeRequest(text="Hi there.", voice=voice),
                                       metadata=md(key), timeout=60))
    return replies[-1].summary


class OpenSession:
    """A StreamingSynthesize call whose input stays open until `end()`; its replies are read
    by gRPC's own thread into a queue."""

    def __init__(self, srv, voice):
        self.inbox, self.out = queue.Queue(), queue.Queue()
        self.inbox.put(pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice=voice)))
        self.call = tts(srv).StreamingSynthesize(iter(self.inbox.get, None), metadata=md(USER_KEY),
                                                 timeout=120)
        self.call.add_done_callback(lambda _: self.out.put(None))
        self.replies = []

    def say(self, text):
        self.inbox.put(pb.StreamingSynthesizeRequest(text=text))
        self.inbox.put(pb.StreamingSynthesizeRequest(flush=pb.Flush()))

    def until_segment_end(self, index):
        for reply in self.call:
            self.replies.append(reply)
            if reply.HasField("segment_end") and reply.segment_end.segment_index == index:
                return

    def end(self):
        self.inbox.put(None)  # half-close: no more text
        self.replies.extend(self.call)  # to the last message and the call's OK status
        return self.replies


def test_no_key_an_ordinary_key_and_an_admin_key(admin_server):
    stub = admin(admin_server)
    code, details = code_of(stub.ListAdapters, apb.ListAdaptersRequest(), timeout=10)
    assert code == grpc.StatusCode.UNAUTHENTICATED and "authorization: Bearer" in details
    for call, req in ((stub.ListAdapters, apb.ListAdaptersRequest()),
                      (stub.UnloadAdapter, apb.UnloadAdapterRequest(name="nova")),
                      (stub.LoadAdapter, apb.LoadAdapterRequest(name="nova", path="/x"))):
        code, details = code_of(call, req, metadata=md(USER_KEY), timeout=10)
        assert code == grpc.StatusCode.PERMISSION_DENIED, details
        assert "'app' may not call the admin service" in details and "admin scope" in details
    pool = listing(admin_server)
    assert (pool.capacity, pool.max_rank, list(pool.adapter_dirs)) == \
        (1, 8, [str(admin_server.config.model.adapter_dirs[0])])
    assert synthesize(admin_server, "tara", key=ADMIN_KEY).audio_ms > 0  # admin keys synthesize


def test_reflection_lists_the_admin_service_and_grpcurl_calls_it(admin_server):
    call = admin_server.channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
    (reply,) = call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                    metadata=md(USER_KEY), timeout=10)
    assert "orpheus.admin.v1.AdminService" in {s.name for s in reply.list_services_response.service}
    if not GRPCURL.exists():
        pytest.skip("grpcurl not installed (scripts/install-tools.sh)")
    base = [str(GRPCURL), "-plaintext", "-H", f"authorization: Bearer {ADMIN_KEY}"]
    out = subprocess.run(base + [admin_server.addr, "describe",
                                 "orpheus.admin.v1.AdminService.LoadAdapter"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "rpc LoadAdapter" in out.stdout, out.stderr
    out = subprocess.run(base + ["-d", "{}", admin_server.addr,
                                 "orpheus.admin.v1.AdminService/ListAdapters"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and json.loads(out.stdout)["capacity"] == 1, out.stderr


def test_a_path_outside_the_adapter_dirs_is_permission_denied(admin_server, adapters):
    before = listing(admin_server)
    code, details = code_of(load, admin_server, "stray", adapters / "escape")
    assert code == grpc.StatusCode.PERMISSION_DENIED and "outside model.adapter_dirs" in details
    code, details = code_of(load, admin_server, "stray", f"{adapters}/../outside")
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert listing(admin_server) == before and "stray" not in voices(admin_server)


def test_load_use_unload_drain_and_reload_while_other_sessions_run(admin_server, adapters):
    backend = admin_server.server.state.runtime.engine.backend
    other = OpenSession(admin_server, "tara")  # a base-voice session open throughout
    other.say("Before anything.")
    other.until_segment_end(0)

    nova = load(admin_server, "nova-lora", adapters / "nova").adapter
    assert (nova.state, nova.slot, nova.rank, list(nova.voices)) == \
        (apb.ADAPTER_STATE_LOADED, 0, 4, ["nova"])
    assert voices(admin_server)["nova"] == "nova-lora"
    assert backend.pool == {0: (str(adapters / "nova"), 4)}
    assert synthesize(admin_server, "Nova").audio_ms > 0

    draining = OpenSession(admin_server, "nova")
    draining.say("First part.")
    draining.until_segment_end(0)  # the session runs on the adapter
    (entry,) = listing(admin_server).adapters
    assert entry.open_sessions == 1

    gone = unload(admin_server, "nova-lora")
    assert not gone.freed and gone.adapter.state == apb.ADAPTER_STATE_DRAINING
    assert gone.adapter.open_sessions == 1
    # its voice takes no new session, on every edge, and says why
    code, details = code_of(synthesize, admin_server, "nova")
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "adapter 'nova-lora', which is being unloaded" in details
    r = httpx.post(f"{admin_server.http}/v1/audio/speech", timeout=30,
                   headers={"Authorization": f"Bearer {USER_KEY}"},
                   json={"model": "tts-1", "input": "Hi.", "voice": "nova",
                         "response_format": "pcm"})
    assert r.status_code == 400 and "being unloaded" in r.json()["error"]["message"]
    assert "nova" not in voices(admin_server)
    # the slot is still held by the session: nothing else may have it yet
    code, details = code_of(load, admin_server, "orion", adapters / "orion")
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "'nova-lora' with 1 open" in details
    assert backend.pool == {0: (str(adapters / "nova"), 4)}

    # the open session goes on to the end, with all its audio
    draining.say("Second part, after the unload.")
    replies = draining.end()
    audio = [r.audio for r in replies if r.HasField("audio")]
    ends = [r.segment_end for r in replies if r.HasField("segment_end")]
    summary = replies[-1].summary
    assert [e.finish_reason in ("stop", "length") for e in ends] == [True, True]
    assert sum(a.num_samples for a in audio) == summary.num_samples > 0
    assert [a.sample_offset for a in audio] == \
        [sum(b.num_samples for b in audio[:i]) for i in range(len(audio))]

    # its last session ended: the slot is free, and the next load gets it
    assert list(listing(admin_server).adapters) == []
    orion = load(admin_server, "orion", adapters / "orion").adapter
    assert orion.slot == 0 and backend.pool == {0: (str(adapters / "orion"), 8)}
    assert synthesize(admin_server, "orion").audio_ms > 0
    assert unload(admin_server, "orion").freed
    again = load(admin_server, "nova-lora", adapters / "nova").adapter  # reload after unload
    assert again.slot == 0 and voices(admin_server)["nova"] == "nova-lora"
    assert synthesize(admin_server, "nova").audio_ms > 0
    assert unload(admin_server, "nova-lora").freed

    other.say("And the base voice was never interrupted.")
    assert other.end()[-1].summary.num_segments == 2


@pytest.fixture(scope="module")
def no_admin_server():
    """Keys, none with the admin scope: the admin service is not even registered."""
    srv = InProcessServer(**{"engine.backend": "sim", "engine.max_sessions": 2,
                             "server.api_keys": keys_doc(("app", USER_KEY, None))}).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_without_an_admin_key_the_service_does_not_exist(no_admin_server):
    code, _ = code_of(admin(no_admin_server).ListAdapters, apb.ListAdaptersRequest(),
                      metadata=md(USER_KEY), timeout=10)
    assert code == grpc.StatusCode.UNIMPLEMENTED
    call = no_admin_server.channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
    (reply,) = call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                    metadata=md(USER_KEY), timeout=10)
    names = {s.name for s in reply.list_services_response.service}
    assert "orpheus.tts.v1.TTSService" in names and "orpheus.admin.v1.AdminService" not in names


def test_the_split_topology_refuses_every_admin_call(no_admin_server):
    """A split front-end's runtime is remote (its engine in another process, each front-end
    counting its own sessions): the calls are refused, saying so (docs/lora.md)."""
    split = AdapterAdmin(no_admin_server.server.state, split=True)
    for call in (split.listing, lambda: split.unload("nova")):
        with pytest.raises(AdminError) as err:
            call()
        assert err.value.code == Status.UNIMPLEMENTED
        assert "server.topology split" in err.value.message


def test_a_refused_admin_call_is_logged_with_the_key_name_never_the_key(admin_server, caplog,
                                                                         capfd):
    code_of(admin(admin_server).ListAdapters, apb.ListAdaptersRequest(), metadata=md(USER_KEY),
            timeout=10)
    code_of(unload, admin_server, "nothing-loaded")
    out, err = capfd.readouterr()
    text = caplog.text + out + err  # structlog: stdlib logging or its own printer
    assert "PERMISSION_DENIED" in text and "app" in text and "NOT_FOUND" in text
    assert ADMIN_KEY not in text and USER_KEY not in text

