"""Minimal Pipecat voice-agent pipeline: a text source -> OrpheusTTSService -> a WAV file.

The "LLM" here is a stand-in that streams a reply token by token, as an LLM service would;
no cloud keys are needed. Run a server first (``orpheus-svc serve``), then:

    pip install './clients/python[pipecat]'
    python examples/pipecat_to_wav.py --server localhost:50051 -o reply.wav

The pipeline runs as Pipecat 1.3+ runs one: a ``PipelineWorker`` added to a ``WorkerRunner``
(``PipelineTask``, ``PipelineRunner`` and ``WorkerRunner.run(worker)`` are deprecated and go
in Pipecat 2.0). The flags are orpheus-say's (``--server``, ``-o/--output``); the older
``--target`` and ``--out`` still work, with a note.

Tracing: with ``OTEL_TRACES_EXPORTER=otlp`` (and ``OTEL_EXPORTER_OTLP_ENDPOINT``, the
variables orpheus-svc reads too) the example turns Pipecat's tracing on and exports its
spans over OTLP/gRPC; a server traced to the same endpoint continues the turn's trace
(docs/observability.md). It needs ``pip install 'pipecat-ai[tracing]'
opentelemetry-exporter-otlp-proto-grpc``.
"""

import argparse
import asyncio
import os
import re
import sys
import wave

from pipecat.frames.frames import (
    EndFrame, LLMFullResponseEndFrame, LLMFullResponseStartFrame, LLMTextFrame, TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.workers.runner import WorkerRunner

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
    ap.add_argument("--rate", type=int, default=24000, help="pipeline output sample rate")
    ap.add_argument("-o", "--output", default="reply.wav", help="WAV file to write")
    ap.add_argument("--target", dest="server", action=Renamed, new="--server")
    ap.add_argument("--out", dest="output", action=Renamed, new="--output")
    return ap.parse_args(argv)


def start_tracing() -> bool:
    """Pipecat's tracing, exporting OTLP/gRPC, when OTEL_TRACES_EXPORTER=otlp is set."""
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() != "otlp":
        return False
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from pipecat.utils.tracing.setup import setup_tracing

    return setup_tracing(os.environ.get("OTEL_SERVICE_NAME", "pipecat-example"),
                         exporter=OTLPSpanExporter())


async def main() -> None:
    args = parse_args()
    tracing = start_tracing()
    tts = OrpheusTTSService(target=args.server, voice=args.voice)
    worker = PipelineWorker(Pipeline([tts, WavWriter(args.output, args.rate)]),
                            params=PipelineParams(audio_out_sample_rate=args.rate),
                            enable_tracing=tracing)
    await worker.queue_frames([LLMFullResponseStartFrame(),
                               *[LLMTextFrame(t) for t in llm_tokens(REPLY)],
                               LLMFullResponseEndFrame(), EndFrame()])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()  # ends when the worker has handled the EndFrame
    if tracing:  # the spans still queued go out before the process ends
        from opentelemetry import trace
        trace.get_tracer_provider().shutdown()
    print(f"wrote {args.output}")


if __name__ == "__main__":
    asyncio.run(main())
