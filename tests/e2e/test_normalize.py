"""normalize_text end to end: a real server on a port (in this process, so the test can see
the GenerationRequests the engine receives) speaks the normalised form and reports the text
as the client sent it."""

import asyncio
import dataclasses

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from orpheus_svc.config import load_config
from orpheus_svc.core.prompt import max_tokens_for_text
from orpheus_svc.models.demo import ensure_demo_checkpoint
from orpheus_svc.models.tokenizer import TextTokenizer
from orpheus_svc.app.server import Server

TEXT = "It costs $3.50 on 12/05/2024."
SPOKEN = "It costs three dollars and fifty cents on December fifth, twenty twenty-four."


async def _run(calls):
    """Start a demo server (tara English, pierre French), make `calls`, return
    ([(decoded prompt, max_tokens)], [responses per call])."""
    config = load_config(environ={}, overrides={
        "server.host": "127.0.0.1", "server.port": 0, "engine.max_sessions": 4,
        "engine.max_batch_size": 4, "model.voices": "tara, pierre:fr"})
    server = Server(config)
    await server.start()
    try:
        await server.load()
        runtime = server.state.runtime
        seen = []
        submit = runtime.engine.submit

        def recording_submit(req, gen_id):
            seen.append(req)
            # the engine runs a short generation: the demo model never stops by itself, and
            # what these tests read is the request as the runtime built it (kept above)
            return submit(dataclasses.replace(req, max_tokens=min(req.max_tokens, 56)), gen_id)

        runtime.engine.submit = recording_submit
        results = []
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = tts_pb2_grpc.TTSServiceStub(channel)
            for request in calls:
                results.append([r async for r in stub.Synthesize(request)])
    finally:
        await server.shutdown()
    tok = TextTokenizer.from_file(ensure_demo_checkpoint().model_dir / "tokenizer.json")
    return [(tok.decode(list(r.prompt_ids)), r.max_tokens) for r in seen], results


def _request(voice="", normalize=None):
    req = pb.SynthesizeRequest(text=TEXT, voice=voice, sampling=pb.SamplingOptions(seed=1))
    if normalize is not None:
        req.normalize_text = normalize
    return req


@pytest.fixture(scope="module")
def outcome():
    return asyncio.run(_run([_request(), _request(normalize=False), _request(normalize=True),
                             _request(voice="pierre", normalize=True)]))


def test_engine_prompt_holds_the_spoken_form_by_default(outcome):
    prompts, results = outcome
    assert prompts[0][0] == f"tara: {SPOKEN}"
    starts = [r.segment_start.text for r in results[0] if r.WhichOneof("response") == "segment_start"]
    ends = [r.segment_end.text for r in results[0] if r.WhichOneof("response") == "segment_end"]
    assert starts == ends == [TEXT]  # the client sees its own text


def test_normalize_text_false_sends_the_text_as_written(outcome):
    prompts, _ = outcome
    assert prompts[1][0] == f"tara: {TEXT}"
    assert prompts[2][0] == f"tara: {SPOKEN}"
    # the token budget follows what is spoken, not what was written
    assert prompts[2][1] == max_tokens_for_text(SPOKEN)
    assert prompts[1][1] == max_tokens_for_text(TEXT) != max_tokens_for_text(SPOKEN)


def test_no_normalisation_for_a_voice_without_a_normaliser(outcome):
    prompts, results = outcome
    assert prompts[3][0] == f"pierre: {TEXT}"
    assert results[3][-1].WhichOneof("response") == "summary"
