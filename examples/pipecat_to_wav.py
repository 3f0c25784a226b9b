"""Minimal Pipecat voice-agent pipeline: a text source -> OrpheusTTSService -> a WAV file.

The "LLM" here is a stand-in that streams a reply token by token, as an LLM service would;
no cloud keys are needed. Run a server first (``orpheus-svc serve``), then:

    pip install './clients/python[pipecat]'
    python examples/pipecat_to_wav.py --target localhost:50051 --out reply.wav
"""

import argparse
import asyncio
import re
import wave

from pipecat.frames.frames import (
    EndFrame, LLMFullResponseEndFrame, LLMFullResponseStartFrame, LLMTextFrame, TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.frame_processor import FrameProcessor

from orpheus_tts_client.pipecat import OrpheusTTSService

REPLY = "Hello! I am a voice agent running on orpheus-svc. <chuckle> How can I help you today?"


class WavWriter(FrameProcessor):
    """Writes the TTS audio that reaches it to a mono PCM16 WAV file."""

    def __init__(self, path: str, sample_rate: int) -> None:
        super().__init__()
        self._wav = wave.open(path, "wb")
        self._wav.setnchannels(1)
        self._wav.setsampwidth(2)
        self._wav.setframerate(sample_rate)

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self._wav.writeframes(frame.audio)
        if isinstance(frame, EndFrame):
            self._wav.close()
        await self.push_frame(frame, direction)


def llm_tokens(text: str) -> list[str]:
    """Split a reply the way an LLM streams it: small pieces, often mid-word."""
    return re.findall(r"\S{1,4}|\s+", text)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="localhost:50051")
    ap.add_argument("--voice", default="tara")
    ap.add_argument("--rate", type=int, default=24000, help="pipeline output sample rate")
    ap.add_argument("--out", default="reply.wav")
    args = ap.parse_args()

    tts = OrpheusTTSService(target=args.target, voice=args.voice)
    task = PipelineTask(Pipeline([tts, WavWriter(args.out, args.rate)]),
                        params=PipelineParams(audio_out_sample_rate=args.rate))
    await task.queue_frames([LLMFullResponseStartFrame(),
                             *[LLMTextFrame(t) for t in llm_tokens(REPLY)],
                             LLMFullResponseEndFrame(), EndFrame()])
    await PipelineRunner(handle_sigint=False).run(task)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
