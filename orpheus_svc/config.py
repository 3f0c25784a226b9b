"""One frozen Config tree, loaded from (lowest to highest precedence):

    defaults  <  profile (conversational | longform)  <  YAML file  <  ORPHEUS_* env  <  flags

Environment variables name a setting as ORPHEUS_<SECTION>__<FIELD>, e.g.
ORPHEUS_ENGINE__MAX_BATCH_SIZE=16 or ORPHEUS_SERVER__PORT=50052. Flags pass the same dotted
names (`--set engine.max_batch_size=16`) or the few shortcuts the CLI defines.

Checks: the loader converts each value to its field's type here (errors name the setting and
the source it came from); each section then checks its own values once, in its
__post_init__ (core/checks.py `require`), and the loader words a failure with the section
("engine.max_batch_size must be >= 1, got 0"). The scheduler's settings are
core/scheduler.py SchedulerSettings under the same names: engine.max_batch_size is
SchedulerSettings.max_batch_size, checked there only. `orpheus-svc config` prints the
effective tree (`dump`).
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
import warnings
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

import yaml

from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.core.backends import BACKENDS
from orpheus_svc.core.checks import SettingError, require
from orpheus_svc.core.lora_config import adapter_dirs, adapter_sources
from orpheus_svc.core.reference import reference_sources
from orpheus_svc.core.request import SamplingError, SamplingParams
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.files import read_mapping

ENV_PREFIX = "ORPHEUS_"


class ConfigError(ValueError):
    """A setting is unknown or invalid; the message names it and where it came from."""


@dataclass(frozen=True)
class ModelConfig:
    """Checkpoints: a local directory in the HF layout or a hub id; None = the demo model."""

    path: str | None = None
    snac: str | None = None
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"   # auto (float32 on CPU, bfloat16 on CUDA) | float32 | float16 | bfloat16
    # The transformer layers' weight matrices: none (in model.dtype) | fp8 (E4M3 with one
    # scale per output row, quantised at load from the checkpoint; activations per token at
    # each matmul: engine/model/linear.py). The embedding, norms, LM head and KV cache stay in
    # model.dtype. torch and graph backends; on CUDA fp8 needs a Hopper or Ada GPU.
    quantization: str = "none"
    # fp8 on CUDA: rowwise (torch._scaled_mm with both scale vectors) | tensorwise (unit
    # scales, the row and column scales applied to the product): the same function; which
    # is faster depends on the card
    fp8_gemm: str = "rowwise"
    # Intra-op threads torch may use on CPU (0 = torch's default).
    cpu_threads: int = 0
    # The voice list, overriding the model's own (docs/voices.md): a voices.json path, or
    # "name:lang, name:lang" with the default first. None = voices.json of the checkpoint,
    # a known preset, else the eight English voices.
    voices: str | None = None
    # LoRA adapters served beside the base model (docs/lora.md): {name: directory or hub id}
    # or {name: {path: ..., voices: ...}} in YAML, "name=path, name=path" in the environment
    # or a flag. Each brings its voices (voices.json beside it); a session picks one by
    # voice name. torch, graph and sim backends (TensorRT-LLM refuses them).
    adapters: Any = None
    # Directories the admin service (orpheus.admin.v1, docs/lora.md) may load adapters from
    # while serving: a YAML list, or "dir, dir" in the environment or a flag; absolute paths.
    # LoadAdapter refuses any path that does not resolve (symlinks followed) inside one.
    # Needs engine.max_adapters and engine.max_lora_rank set. Empty: no runtime loads.
    adapter_dirs: Any = None
    # Voices cloned zero-shot from a clip and its transcript (docs/voices.md, "Reference
    # voices"; the pretrained checkpoint only): a YAML list of {name, clip, transcript,
    # language}, or the same list as JSON in the environment or a flag; clip paths absolute.
    reference_voices: Any = None
    # Directories clips may be read from when a reference voice is loaded while serving: a
    # YAML list, or "dir, dir"; absolute paths. A clip is accepted only if it resolves
    # (symlinks followed) inside one (audio/clip.py resolve_clip_path).
    reference_dirs: Any = None

    def __post_init__(self) -> None:
        try:
            adapter_sources(self.adapters)
            adapter_dirs(self.adapter_dirs)
            reference_sources(self.reference_voices)
            adapter_dirs(self.reference_dirs, "model.reference_dirs")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        require(self.dtype in ("auto", "float32", "float16", "bfloat16"), self, "dtype",
                "must be auto, float32, float16 or bfloat16")
        require(self.quantization in ("none", "fp8"), self, "quantization",
                "must be none or fp8")
        require(self.fp8_gemm in ("rowwise", "tensorwise"), self, "fp8_gemm",
                "must be rowwise or tensorwise")
        require(self.device == "auto" or self.device.split(":")[0] in ("cpu", "cuda"), self,
                "device", "must be auto, cpu, cuda or cuda:N")


_SCHEDULER = SchedulerSettings()  # the scheduler's defaults, written once (core/scheduler.py)
# engine.row_budget's spellings (YAML reads a bare true/on as a boolean: "True" here)
_ON_OFF = {"auto": "auto", "true": "true", "on": "true", "1": "true", "yes": "true",
           "false": "false", "off": "false", "0": "false", "no": "false"}


@dataclass(frozen=True)
class EngineConfig:
    # a name of core/backends.py BACKENDS: torch (eager reference) | graph (the same model,
    # CUDA graphs + run-ahead: the fast GPU path) | trtllm | sim
    backend: str = "torch"
    max_sessions: int = 32  # KV slots, allocated at start-up
    max_seq_len: int = 4096
    # The scheduler's settings (SchedulerSettings, same names; its comments say what they do)
    max_batch_size: int = _SCHEDULER.max_batch_size
    max_waiting: int = _SCHEDULER.max_waiting
    aging_steps: int = _SCHEDULER.aging_steps
    max_prefill_tokens: int = _SCHEDULER.max_prefill_tokens
    max_ahead_seconds: float = _SCHEDULER.max_ahead_seconds  # playout horizon; 0 = off
    # Real-time row budget at admission (SchedulerSettings.row_budget): true | false |
    # auto: on where the backend runs at real time (core/backends.py), off on the CPU,
    # where it only delays later segments. Resolved and logged at start-up (runtime.py).
    row_budget: str = "auto"
    row_budget_headroom: float = _SCHEDULER.row_budget_headroom
    seed: int | None = None  # engine seed for requests without one (None: random per start)
    # The cyclic garbage collector runs in the engine thread, between steps, instead of
    # wherever its threshold falls (engine/collector.py); false: CPython's automatic one.
    gc_pacing: bool = True
    # graph: capture one CUDA graph per batch bucket at start-up (on CUDA); false runs the
    # same step eagerly on the same static buffers (debugging; always so on the CPU)
    cuda_graphs: bool = True
    # graph: prompt tokens a step's captured graph holds beside max_batch_size decode rows
    # (a new prompt's tokens are rows of the step: no eager prefill); caps the prefill budget
    graph_prefill_rows: int = 256
    # KV cache element type: auto (the model dtype) | fp8 (E4M3, one scale per slot, kv head
    # and layer, calibrated at start-up: engine/model/kv_fp8.py); fp8: graph backend only
    kv_cache_dtype: str = "auto"
    # LoRA adapter pool (docs/lora.md), allocated once at start-up on the device: adapter
    # slots (0: as many as model.adapters names) and the largest rank one may have (0: the
    # largest of model.adapters). A lower rank is zero-padded to it, so a step's LoRA cost
    # follows max_lora_rank, not each adapter's own.
    max_adapters: int = 0
    max_lora_rank: int = 0
    # The prefix pool (torch and graph backends; docs/voices.md): the KV of each reference
    # voice's clip and transcript, computed once at registration and copied into a slot at
    # admission instead of prefilled with every segment. Preallocated at start-up in the
    # KV cache's dtype: for Orpheus-3B in bf16, 114,688 B a token, so 1024 MB holds some
    # 9,360 tokens (about five 20 s references). 0: no pool (each segment computes its
    # prefix). A registration that does not fit is refused (RESOURCE_EXHAUSTED).
    prefix_pool_mb: int = 1024
    # trtllm
    trtllm_engine_dir: str | None = None
    trtllm_kv_free_gpu_fraction: float = 0.9
    trtllm_grammar_mask: bool = True  # audio-grammar logits processor (tokens are validated anyway)
    # TensorRT-LLM PyTorch backend's overlap scheduler. auto | off: off, since every request's
    # logits processor (repetition penalty, grammar mask) needs the last token, which the
    # overlap scheduler hands it a step late (docs/tensorrt-llm.md); on: refused at start-up
    trtllm_overlap_scheduler: str = "auto"
    # sim
    sim_profile: str = "h100-fp8"
    sim_codec: bool = True
    # Injected faults for tests only (engine/sim/backend.py SimFaults), e.g. "step_error:7@14"; "" = none.
    sim_faults: str = ""
    # (engine.sim_profile is checked by the sim backend, against engine/sim/profiles.py:
    # the config does not import the engine.)

    def __post_init__(self) -> None:
        require(self.backend in BACKENDS, self, "backend",
                f"must be one of {', '.join(BACKENDS)}")
        require(isinstance(self.cuda_graphs, bool), self, "cuda_graphs", "must be true or false")
        require(self.max_sessions >= 1, self, "max_sessions", "must be >= 1")
        require(0 <= self.max_adapters <= 1024, self, "max_adapters", "must be 0..1024")
        require(0 <= self.max_lora_rank <= 512, self, "max_lora_rank", "must be 0..512")
        require(isinstance(self.prefix_pool_mb, int) and 0 <= self.prefix_pool_mb <= 1 << 20,
                self, "prefix_pool_mb", "must be 0..1048576 (MB)")
        require(0 <= self.graph_prefill_rows <= 65536, self, "graph_prefill_rows",
                "must be 0..65536")
        require(self.max_seq_len >= 64, self, "max_seq_len", "must be >= 64")
        require(self.kv_cache_dtype in ("auto", "fp8"), self, "kv_cache_dtype",
                "must be auto or fp8")
        require(self.kv_cache_dtype == "auto" or self.backend == "graph", self,
                "kv_cache_dtype", "fp8 is served by the graph backend only")
        require(isinstance(self.gc_pacing, bool), self, "gc_pacing", "must be true or false")
        require(0 < self.trtllm_kv_free_gpu_fraction <= 1, self, "trtllm_kv_free_gpu_fraction",
                "must be in (0, 1]")
        # YAML reads a bare on/off as a boolean, which arrives here as "True"/"False"
        require(self.trtllm_overlap_scheduler.lower() in ("auto", "on", "off", "true", "false"),
                self, "trtllm_overlap_scheduler", "must be auto, on or off")
        budget = _ON_OFF.get(str(self.row_budget).strip().lower())
        require(budget is not None, self, "row_budget", "must be auto, true or false")
        object.__setattr__(self, "row_budget", budget)
        self.scheduler_settings()  # the scheduler checks its own fields

    def row_budget_choice(self, device_type: str) -> tuple[bool, str]:
        """Whether the real-time row budget is on for this backend on `device_type`
        ("cpu" or "cuda"), and why, in words for the start-up log."""
        if self.row_budget != "auto":
            return self.row_budget == "true", f"engine.row_budget={self.row_budget}"
        traits = BACKENDS[self.backend]
        on = traits.runs_at_real_time(device_type)
        where = "" if traits.real_time == "always" else f" on {device_type}"
        why = (f"the {self.backend} backend{where} "
               + ("runs at real time" if on else "is slower than real time, where the budget "
                                                 "would only delay later segments"))
        return on, f"engine.row_budget=auto: {'on' if on else 'off'} ({why})"

    def scheduler_settings(self, device_type: str = "cpu") -> SchedulerSettings:
        """The scheduler's settings: the fields of the same names, with row_budget resolved
        for this backend on `device_type` (row_budget_choice)."""
        values = {f.name: getattr(self, f.name)
                  for f in fields(SchedulerSettings) if hasattr(self, f.name)}
        values["row_budget"] = self.row_budget_choice(device_type)[0]
        return SchedulerSettings(**values)


@dataclass(frozen=True)
class TextConfig:
    max_text_chars: int = 5000       # one request's whole text (Synthesize) / one session's input
    max_segment_chars: int = 300     # a segment is cut at this length if no sentence end comes
    # >0: a session's first segment may end at a clause mark (, ; :) once this long, so the
    # first audio need not wait for a long first sentence to stream in (0 = sentence ends only)
    first_clause_min_chars: int = 0
    max_segments_in_flight: int = 2  # segments of one session generating at once
    # Default of SynthesisConfig.normalize_text for sessions that leave it unset: speak
    # "$3.50" as "three dollars and fifty cents" (English voices only; docs/api.md).
    normalize: bool = True

    def __post_init__(self) -> None:
        require(self.max_text_chars >= 1, self, "max_text_chars", "must be >= 1")
        require(20 <= self.max_segment_chars <= self.max_text_chars, self, "max_segment_chars",
                "must be between 20 and text.max_text_chars")
        require(self.max_segments_in_flight >= 1, self, "max_segments_in_flight", "must be >= 1")
        require(0 <= self.first_clause_min_chars <= self.max_segment_chars, self,
                "first_clause_min_chars", "must be between 0 and text.max_segment_chars")


@dataclass(frozen=True)
class ServerConfig:
    host: str = "0.0.0.0"
    port: int = 50051
    reflection: bool = True
    grace_seconds: float = 20.0
    # After SIGTERM: report NOT_SERVING and refuse new sessions this long before the listener
    # closes, so load balancers and readiness probes see it while calls still connect.
    drain_delay_seconds: float = 1.0
    metrics_port: int = 0  # 0 = off
    # The HTTP edge (OpenAI-shaped /v1/audio/speech, WebSocket streaming, playground page)
    # on the same Runtime and event loop as gRPC (docs/http.md). 0 = off.
    http_port: int = 0
    # >0: ask clients to reconnect after this long (GOAWAY), so dns:/// round_robin clients
    # re-resolve and find replicas added by a scale-up; calls in flight may run on for
    # max_connection_age_grace_seconds. 0 = connections live as long as clients keep them.
    max_connection_age_seconds: float = 0.0
    max_connection_age_grace_seconds: float = 600.0
    log_format: str = "json"  # json | console
    log_level: str = "info"
    # Open StreamingSynthesize/Synthesize calls in total (idle ones included); one more is
    # refused at once with RESOURCE_EXHAUSTED. 0 = no limit.
    max_sessions: int = 1024
    # HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: calls one client connection may have open at
    # once (further calls wait in the client until one ends). 0 = gRPC's default (no limit).
    max_concurrent_streams: int = 256
    # Keepalive: the server pings each connection this often and drops it when the ack
    # does not come within keepalive_timeout_seconds (dead peers free their calls); a client
    # pinging more often than min_client_ping_interval_seconds gets GOAWAY (too_many_pings)
    # after max_ping_strikes pings.
    keepalive_time_seconds: float = 60.0
    keepalive_timeout_seconds: float = 20.0
    min_client_ping_interval_seconds: float = 10.0
    max_ping_strikes: int = 2
    # Connections that never speak: one that has not finished its handshake (TLS, the HTTP/2
    # preface and SETTINGS) within handshake_timeout_seconds is closed; one with no call open
    # for max_connection_idle_seconds gets GOAWAY and is closed (a client that only sent the
    # preface, or an idle client, which reconnects on its next call). Without them each such
    # connection would hold a file descriptor for good. 0 = no idle limit.
    handshake_timeout_seconds: float = 10.0
    max_connection_idle_seconds: float = 120.0
    # The Prometheus port's address (server.metrics_port). Loopback unless set: the metrics
    # have no authentication (the Kubernetes overlays set the pod's address).
    metrics_host: str = "127.0.0.1"
    # TLS on the gRPC port from PEM files, re-read when they change (docs/security.md). With
    # both set the server opens no plaintext gRPC port. tls_client_ca_file adds mTLS: clients
    # must present a certificate signed by this CA.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    # API keys ('authorization: Bearer <key>'): a YAML/JSON file of names, key hashes and
    # per-key limits, re-read on change, and/or the same document inline (e.g. in
    # ORPHEUS_SERVER__API_KEYS). Neither set = no keys (every caller admitted).
    api_keys_file: str | None = None
    api_keys: str = ""
    # With keys on, reflection and GetStatus need a key too unless opened here (health is
    # always open: probes carry no key).
    auth_open_reflection: bool = False
    auth_open_status: bool = False
    # Process topology (docs/configuration.md, docs/capacity.md). single: one process runs
    # gRPC, sessions and the engine. split: one engine process (scheduler, slots, backend,
    # flusher, SNAC) and server.frontends gRPC front-end processes sharing server.port
    # (SO_REUSEPORT), connected over ZeroMQ (orpheus_svc/ipc/).
    topology: str = "single"
    frontends: int = 2
    # Slow is not dead (docs/deploy.md, "Faults of our own processes"). One engine step
    # that runs this long is a stall: the calls whose generations wait on it end UNAVAILABLE
    # (a client retries on another replica) and so do new ones while it lasts; health is
    # NOT_SERVING from 2 s into a stall and SERVING again once steps move. 10 s: two orders
    # above the slowest healthy step (a long prefill on a loaded GPU, a graph capture, a full
    # GC pass, a VM pause all take well under 5 s), so slow is never taken for dead, and
    # short enough that a caller who hears silence gets a status while a retry still helps.
    engine_stall_timeout_seconds: float = 10.0
    # A stall this long means the engine cannot recover: the server (in split: the engine
    # process, and with it the parent) exits with code 4 for its supervisor to restart it.
    # Time the process was frozen as a whole (SIGSTOP, a VM pause) does not count. Keep it
    # below the liveness probe's window (deploy/k8s). 0 = never (a probe must catch it).
    engine_stall_exit_seconds: float = 30.0
    # Split: a front-end process that dies is restarted, after 0.5 s doubling with each
    # death in the window (at most 10 s); more than frontend_max_restarts deaths within
    # frontend_restart_window_seconds is a crash loop and the server exits with code 5.
    # 0 = no restarts: a front-end's death stops the server.
    frontend_max_restarts: int = 5
    frontend_restart_window_seconds: float = 60.0
    # The asyncio event loop every serving process runs (server/eventloop.py): auto = uvloop
    # when it is installed (the server extra installs it on Linux and macOS), else asyncio's
    # own | uvloop (refuse to start without it) | asyncio. uvloop does less interpreter work
    # per gRPC message on a loaded server.
    event_loop: str = "auto"

    def __post_init__(self) -> None:
        require(self.topology in ("single", "split"), self, "topology", "must be single or split")
        require(self.event_loop in ("auto", "uvloop", "asyncio"), self, "event_loop",
                "must be auto, uvloop or asyncio")
        require(1 <= self.frontends <= 64, self, "frontends", "must be 1..64")
        require(self.engine_stall_timeout_seconds > 0, self, "engine_stall_timeout_seconds",
                "must be > 0")
        require(self.engine_stall_exit_seconds == 0
                or self.engine_stall_exit_seconds >= self.engine_stall_timeout_seconds, self,
                "engine_stall_exit_seconds",
                "must be 0 (never) or >= server.engine_stall_timeout_seconds")
        require(self.frontend_max_restarts >= 0, self, "frontend_max_restarts", "must be >= 0")
        require(self.frontend_restart_window_seconds > 0, self,
                "frontend_restart_window_seconds", "must be > 0")
        for name in ("port", "metrics_port", "http_port"):
            require(0 <= getattr(self, name) <= 65535, self, name, "must be 0..65535")
        for name in ("grace_seconds", "max_connection_age_seconds",
                     "max_connection_age_grace_seconds", "drain_delay_seconds",
                     "max_concurrent_streams", "min_client_ping_interval_seconds",
                     "max_ping_strikes", "max_connection_idle_seconds"):
            require(getattr(self, name) >= 0, self, name, "must be >= 0")
        require(self.log_format in ("json", "console"), self, "log_format",
                "must be json or console")
        require(self.max_sessions >= 0, self, "max_sessions", "must be >= 0 (0 = no limit)")
        for name in ("keepalive_time_seconds", "keepalive_timeout_seconds",
                     "handshake_timeout_seconds"):
            require(getattr(self, name) > 0, self, name, "must be > 0")
        require(bool(self.tls_cert_file) == bool(self.tls_key_file), self, "tls_key_file",
                "and server.tls_cert_file must be set together")
        require(not self.tls_client_ca_file or bool(self.tls_cert_file), self,
                "tls_client_ca_file", "needs server.tls_cert_file and server.tls_key_file "
                "(mTLS is TLS first)")


@dataclass(frozen=True)
class SessionConfig:
    """Time limits of one call (docs/configuration.md, docs/api.md). 0 = off."""

    # No client message for this long and nothing left to speak: the buffered text is
    # spoken, then the call ends with DEADLINE_EXCEEDED.
    idle_timeout_seconds: float = 60.0
    # Audio waits this long for a client that reads nothing: the call's generations are
    # cancelled and it ends with DEADLINE_EXCEEDED.
    stalled_consumer_timeout_seconds: float = 30.0

    def __post_init__(self) -> None:
        for name in ("idle_timeout_seconds", "stalled_consumer_timeout_seconds"):
            require(getattr(self, name) >= 0, self, name, "must be >= 0 (0 = off)")


@dataclass(frozen=True)
class HttpConfig:
    """Bounds of the HTTP edge (server.http_port) on what a client may send and how slowly
    (docs/http.md, "Limits"). Each is on by default; a time of 0 turns that bound off."""

    # A POST body larger than this is refused with 413 before it is read (by its
    # Content-Length, or once a chunked body passes it); also the largest WebSocket message.
    max_body_bytes: int = 1 << 20
    # From the connection (or the end of the previous response) to the end of the request
    # head; past it the connection is closed. Also bounds a WebSocket's upgrade request.
    head_timeout_seconds: float = 10.0
    # From the end of the head to the end of the body; past it: 408 and the connection closed.
    body_timeout_seconds: float = 15.0
    # A WebSocket's first message (the config) must come this soon after the upgrade;
    # past it: an error event (DEADLINE_EXCEEDED) and close 1008.
    ws_config_timeout_seconds: float = 10.0
    # Connections whose request head has not arrived yet; one more is closed at once.
    max_pending_connections: int = 256
    # A response given before the request body was read (413, 401, 408) is followed by a
    # lingering close (http/linger.py): the write side is shut and the rest of the body read
    # and thrown away, so that a client still sending gets the answer instead of a reset.
    # It ends when the client closes, after this long, or past linger_max_bytes (0 = close
    # at once). 5 s drains 100 MB on a 1 Gbit/s link with room to spare; a refused
    # connection is held at most this much longer than its answer.
    linger_seconds: float = 5.0
    # Bytes read and discarded at most while lingering: above the bodies real clients send
    # by mistake (the openai SDK with a 100 MB input), below what would let one connection
    # keep the server reading at line rate for the whole linger time.
    linger_max_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        require(self.max_body_bytes >= 1024, self, "max_body_bytes", "must be >= 1024")
        require(self.linger_max_bytes >= 0, self, "linger_max_bytes", "must be >= 0")
        for name in ("head_timeout_seconds", "body_timeout_seconds", "ws_config_timeout_seconds",
                     "linger_seconds"):
            require(getattr(self, name) >= 0, self, name, "must be >= 0 (0 = off)")
        require(self.max_pending_connections >= 1, self, "max_pending_connections",
                "must be >= 1")


@dataclass(frozen=True)
class TelemetryConfig:
    """What tracing adds to OpenTelemetry's own settings (docs/observability.md). Tracing
    is configured by the standard OTEL_* variables (OTEL_TRACES_EXPORTER=otlp turns it on,
    OTEL_EXPORTER_OTLP_ENDPOINT says where to, OTEL_SERVICE_NAME...); it is off unless
    OTEL_TRACES_EXPORTER names an exporter."""

    # Put each segment's text on its span (orpheus.text). Off: a span says how long, how
    # many tokens and which voice, never what was said.
    trace_text: bool = False
    # Sample this share of new traces (a caller's sampled flag is followed either way:
    # parent-based). None: OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG decide (the SDK's
    # default: every trace).
    trace_sample_ratio: float | None = None

    def __post_init__(self) -> None:
        require(self.trace_sample_ratio is None or 0.0 <= self.trace_sample_ratio <= 1.0,
                self, "trace_sample_ratio", "must be between 0 and 1 (or unset)")


@dataclass(frozen=True)
class Config:
    profile: str = "conversational"
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    # the sampling of requests that leave a field unset (SamplingParams' own defaults and
    # ranges: core/request.py); no default seed (a seed belongs to a session)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    flusher: FlusherSettings = field(default_factory=FlusherSettings)
    text: TextConfig = field(default_factory=TextConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)


# The seed's two tuning profiles: conversational favours time to first audio (short texts,
# small segments), longform favours throughput on long texts.
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "conversational": {
        "text": {"max_text_chars": 2000, "max_segment_chars": 250},
        "engine": {"max_sessions": 32, "max_batch_size": 32},
    },
    "longform": {
        "text": {"max_text_chars": 5000, "max_segment_chars": 400, "max_segments_in_flight": 3},
        # long texts generate far ahead of playback when everything runs every step; the
        # 3 s horizon keeps steps short
        "engine": {"max_sessions": 32, "max_batch_size": 32, "max_seq_len": 4096,
                   "max_ahead_seconds": 3.0},
    },
}


def _convert(value: Any, annotation: Any, where: str) -> Any:
    """Convert a YAML/env/flag value to the field's type."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
            return None
        return _convert(value, args[0], where)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if annotation in (int, float):
        try:
            if isinstance(value, bool):
                raise ValueError
            num = annotation(value)
            if annotation is int and isinstance(value, float) and value != num:
                raise ValueError
            return num
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected {annotation.__name__}, got {value!r}") from None
    if annotation is str:
        return str(value)
    return value


def _build(cls: type, data: Mapping[str, Any], where: str,
           sources: Mapping[str, str] | None = None) -> Any:
    """cls from `data` (a section's settings, `where` its dotted name); `sources`: where each
    dotted setting was given (a file, a variable, a flag), named in a check's error."""
    sources = sources or {}
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown setting (known: {', '.join(sorted(known))})"
                              .lstrip("."))
        ann = hints[key]
        name = f"{where}.{key}".lstrip(".")
        if dataclasses.is_dataclass(ann):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{name}: expected a mapping of settings, got {value!r}")
            kwargs[key] = _build(ann, value, name, sources)
        else:
            kwargs[key] = _convert(value, ann, name)

    def origin(setting: str) -> str:
        source = sources.get(f"{where}.{setting}".lstrip("."))
        return f" (from {source})" if source else ""
    try:
        built = cls(**kwargs)
        if cls is SamplingParams:
            _check_sampling(built)
        return built
    except ConfigError:  # already names its setting
        raise
    except SettingError as exc:  # a section's own check: name the setting as the file does
        raise ConfigError((exc.worded(where) if where else str(exc)) + origin(exc.name)) from exc
    except SamplingError as exc:
        raise ConfigError(f"{where}.{exc.field}: {exc}{origin(exc.field)}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where or 'config'}: {exc}") from exc


def _check_sampling(sampling: SamplingParams) -> None:
    """The sampling section: SamplingParams' own ranges, checked at start-up (an operator's
    mistake must not turn into every request's refusal), and no seed (a session's own)."""
    sampling.validate()
    if sampling.seed is not None:
        raise SamplingError("seed", "a seed belongs to a session: set it in the request "
                                    "(SamplingOptions.seed), not in the server's defaults")


def _merge(base: dict, extra: Mapping) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def _set_dotted(tree: dict, dotted: str, value: Any, source: str) -> None:
    parts = [p for p in dotted.split(".") if p]
    if len(parts) < 2:
        if parts == ["profile"]:
            tree["profile"] = value
            return
        raise ConfigError(f"{source}: {dotted!r} must name a section and a setting, e.g. engine.max_batch_size")
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def _leaves(tree: Mapping, prefix: str = "") -> list[str]:
    """The dotted names of every setting in a tree of sections."""
    out = []
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        out.extend(_leaves(value, name) if isinstance(value, Mapping) else [name])
    return out


def env_overrides(environ: Mapping[str, str]) -> dict:
    tree: dict = {}
    for key, value in environ.items():
        if key.startswith(ENV_PREFIX) and "__" in key:
            dotted = key[len(ENV_PREFIX):].lower().replace("__", ".")
            _set_dotted(tree, dotted, value, f"environment {key}")
        elif key == ENV_PREFIX + "PROFILE":
            tree["profile"] = value
    return tree


def load_config(path: str | os.PathLike[str] | None = None, *, overrides: Mapping[str, Any] = (),
                environ: Mapping[str, str] | None = None) -> Config:
    """Build the Config. `overrides` are dotted names from flags (highest precedence)."""
    environ = os.environ if environ is None else environ
    file_tree: dict = {}
    if path is not None:
        file_tree = read_mapping(path, ConfigError, what="config file", syntax="YAML",
                                 expected="a mapping of sections at the top level")
    env_tree = env_overrides(environ)
    flag_tree: dict = {}
    for dotted, value in dict(overrides).items():
        _set_dotted(flag_tree, dotted, value, f"flag {dotted}")
    profile = flag_tree.get("profile") or env_tree.get("profile") or file_tree.get("profile") \
        or Config.profile
    if profile not in PROFILES:
        raise ConfigError(f"profile: unknown profile {profile!r} (known: {', '.join(PROFILES)})")
    tree: dict = {"profile": profile}
    sources: dict[str, str] = {}  # where each setting was given last (the one that holds)
    env_names = {key[len(ENV_PREFIX):].lower().replace("__", "."): key for key in environ
                 if key.startswith(ENV_PREFIX) and "__" in key}
    for layer, source in ((PROFILES[profile], lambda d: f"profile {profile}"),
                          (file_tree, lambda d: f"config file {path}"),
                          (env_tree, lambda d: f"environment {env_names.get(d, d)}"),
                          (flag_tree, lambda d: f"flag --set {d}")):
        tree = _merge(tree, layer)
        sources.update((d, source(d)) for d in _leaves(layer))
    tree["profile"] = profile
    _drop_removed(tree)
    return _build(Config, tree, "", sources)


# Settings that no longer exist: dotted name -> (value still accepted, why it went). The
# accepted value is what the server does anyway, so old files keep working (with a warning);
# any other value is an error that says what to do instead.
REMOVED = {
    "engine.scheduler_policy": (
        "deadline",
        "the server always schedules by deadline; the fifo and round_robin baselines of the "
        "scheduling comparison live in bench/orpheus_bench/policies.py "
        "(scripts/policy-compare.sh runs them)"),
}


def _drop_removed(tree: dict) -> None:
    for dotted, (accepted, why) in REMOVED.items():
        section, key = dotted.split(".")
        node = tree.get(section)
        if not isinstance(node, dict) or key not in node:
            continue
        value = node.pop(key)
        if str(value).strip() != accepted:
            raise ConfigError(f"{dotted}: this setting was removed ({why}); got {value!r}")
        warnings.warn(f"{dotted} is deprecated and ignored: {why}; remove it from your "
                      "configuration", FutureWarning, stacklevel=3)


def dump(config: Config) -> str:
    """The configuration as a config file (YAML) that loads back to the same Config."""
    return yaml.safe_dump(dataclasses.asdict(config), sort_keys=False, default_flow_style=False)
