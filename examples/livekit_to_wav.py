"""Minimal LiveKit Agents TTS use: a text source -> OrpheusTTS.stream() -> a WAV file.

An agent's LLM pushes its reply into the TTS stream as it is generated; here a stand-in
streams a fixed reply token by token, so no cloud keys or LiveKit server are needed. Run an
orpheus-svc server first (``orpheus-svc serve``), then:

    pip install './clients/python[livekit]'
    python examples/livekit_to_wav.py --server localhost:50051 -o reply.wav

The flags are orpheus-say's (``--server``, ``-o/--output``); the older ``--target`` and
``--out`` still work, with a note.
"""

import argparse
import asyncio
import os
import re
import sys
import wave

from orpheus_tts_client.livekit import OrpheusTTS

REPLY = "Hello! I am a LiveKit agent speaking through orpheus-svc. <sigh> What a day. Bye now."


def llm_tokens(text: str) -> list[str]:
    """Split a reply the way an LLM streams it: small pieces, often mid-word."""
    return re.findall(r"\S{1,4}|\s+", text)


class Renamed(argparse.Action):
    """A flag's old name: still accepted, with a note on stderr naming the new one."""

    def __init__(self, *args, new: str, **kwargs) -> None:
        super().__init__(*args, help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, value, option_string=None):
        print(f"note: {option_string} is now {self.new} (as in orpheus-say)", file=sys.stderr)
        setattr(namespace, self.dest, value)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default=os.environ.get("ORPHEUS_SERVER_ADDR", "localhost:50051"),
                    help="orpheus-svc address (default $ORPHEUS_SERVER_ADDR or localhost:50051)")
    ap.add_argument("--voice", default="tara")
    ap.add_argument("--rate", type=int, default=24000)
    ap.add_argument("-o", "--output", default="reply.wav", help="WAV file to write")
    ap.add_argument("--target", dest="server", action=Renamed, new="--server")
    ap.add_argument("--out", dest="output", action=Renamed, new="--output")
    return ap.parse_args(argv)


async def main() -> None:
    args = parse_args()
    async with OrpheusTTS(target=args.server, voice=args.voice, sample_rate=args.rate) as tts:
        stream = tts.stream()

        async def llm() -> None:
            for token in llm_tokens(REPLY):
                stream.push_text(token)
                await asyncio.sleep(0.01)  # tokens arrive over time, as from an LLM
            stream.end_input()

        producer = asyncio.create_task(llm())
        with wave.open(args.output, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(args.rate)
            async for ev in stream:
                wav.writeframes(ev.frame.data.tobytes())
        await producer
        await stream.aclose()
    print(f"wrote {args.output}")


if __name__ == "__main__":
    asyncio.run(main())
