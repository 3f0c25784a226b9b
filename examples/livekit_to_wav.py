"""Minimal LiveKit Agents TTS use: a text source -> OrpheusTTS.stream() -> a WAV file.

An agent's LLM pushes its reply into the TTS stream as it is generated; here a stand-in
streams a fixed reply token by token, so no cloud keys or LiveKit server are needed. Run an
orpheus-svc server first (``orpheus-svc serve``), then:

    pip install './clients/python[livekit]'
    python examples/livekit_to_wav.py --target localhost:50051 --out reply.wav
"""

import argparse
import asyncio
import re
import wave

from orpheus_tts_client.livekit import OrpheusTTS

REPLY = "Hello! I am a LiveKit agent speaking through orpheus-svc. <sigh> What a day. Bye now."


def llm_tokens(text: str) -> list[str]:
    """Split a reply the way an LLM streams it: small pieces, often mid-word."""
    return re.findall(r"\S{1,4}|\s+", text)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="localhost:50051")
    ap.add_argument("--voice", default="tara")
    ap.add_argument("--rate", type=int, default=24000)
    ap.add_argument("--out", default="reply.wav")
    args = ap.parse_args()

    async with OrpheusTTS(target=args.target, voice=args.voice, sample_rate=args.rate) as tts:
        stream = tts.stream()

        async def llm() -> None:
            for token in llm_tokens(REPLY):
                stream.push_text(token)
                await asyncio.sleep(0.01)  # tokens arrive over time, as from an LLM
            stream.end_input()

        producer = asyncio.create_task(llm())
        with wave.open(args.out, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(args.rate)
            async for ev in stream:
                wav.writeframes(ev.frame.data.tobytes())
        await producer
        await stream.aclose()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
