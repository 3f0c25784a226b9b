"""A seed reproduces the audio (issue 29 item 2), also on a busy server (issue 33): two
Synthesize calls with one seed return byte-identical PCM, on the demo model with its codec
as served (SNAC's noise on), through the public API, whether the call runs alone or beside
8 other sessions (seeded and unseeded, other texts) that share its steps and its codec
calls (tests/audio/test_codec.py shows another seed draws other noise).

What this end-to-end check sees: a token chosen differently, or a window cut or noised
differently (cutting a seeded session's windows by the listener's clock fails both tests).
What it cannot see: a last-bit float difference, which PCM16 rounds away and which on the
demo model's near-flat logits seldom moves a token (the code before issue 33 passed it).
The sensitive checks compare bits: tests/engine/test_batch_invariance.py (logits) and
tests/audio/test_seeded_calls.py (the codec's float PCM)."""

import threading

from orpheus_tts_client.proto.v1 import tts_pb2 as pb

TEXT = "Hi there. Bye now."  # two segments: seeds 9 and 10
NEIGHBOURS = ["Good morning, how are you doing today?", "One two three. Four five six.",
              "The weather is fine.", "Let us meet at noon.", "Thanks, that is all.",
              "See you soon. Take care.", "Numbers: 42 and 7.", "Okay!"]


def _pcm(stub, seed, text=TEXT):
    sampling = pb.SamplingOptions(seed=seed) if seed is not None else None
    responses = list(stub.Synthesize(pb.SynthesizeRequest(text=text, voice="tara",
                                                          sampling=sampling), timeout=120))
    assert responses[-1].WhichOneof("response") == "summary"
    return b"".join(r.audio.audio for r in responses if r.WhichOneof("response") == "audio")


def test_one_seed_gives_byte_identical_pcm_alone_and_beside_other_sessions(stub):
    alone = _pcm(stub, 9)
    assert len(alone) > 0 and alone == _pcm(stub, 9)
    started = threading.Barrier(len(NEIGHBOURS) + 1)
    errors = []

    def neighbour(k):
        started.wait()
        try:  # two of them seeded, the others not
            _pcm(stub, 500 + k if k < 2 else None, NEIGHBOURS[k])
        except Exception as exc:  # surfaced below: a failed neighbour is a failed test
            errors.append(exc)

    threads = [threading.Thread(target=neighbour, args=(k,)) for k in range(len(NEIGHBOURS))]
    for t in threads:
        t.start()
    started.wait()
    busy = _pcm(stub, 9)
    for t in threads:
        t.join(120)
    assert not errors
    assert busy == alone
