from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AudioEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIO_ENCODING_UNSPECIFIED: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_PCM16: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_MULAW: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_WAV: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_ALAW: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_OGG_OPUS: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_MP3: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_FLAC: _ClassVar[AudioEncoding]

class SegmentEndCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEGMENT_END_CAUSE_UNSPECIFIED: _ClassVar[SegmentEndCause]
    SEGMENT_END_CAUSE_SENTENCE: _ClassVar[SegmentEndCause]
    SEGMENT_END_CAUSE_FLUSH: _ClassVar[SegmentEndCause]
    SEGMENT_END_CAUSE_MAX_LENGTH: _ClassVar[SegmentEndCause]
    SEGMENT_END_CAUSE_END_OF_INPUT: _ClassVar[SegmentEndCause]
    SEGMENT_END_CAUSE_CLAUSE: _ClassVar[SegmentEndCause]
AUDIO_ENCODING_UNSPECIFIED: AudioEncoding
AUDIO_ENCODING_PCM16: AudioEncoding
AUDIO_ENCODING_MULAW: AudioEncoding
AUDIO_ENCODING_WAV: AudioEncoding
AUDIO_ENCODING_ALAW: AudioEncoding
AUDIO_ENCODING_OGG_OPUS: AudioEncoding
AUDIO_ENCODING_MP3: AudioEncoding
AUDIO_ENCODING_FLAC: AudioEncoding
SEGMENT_END_CAUSE_UNSPECIFIED: SegmentEndCause
SEGMENT_END_CAUSE_SENTENCE: SegmentEndCause
SEGMENT_END_CAUSE_FLUSH: SegmentEndCause
SEGMENT_END_CAUSE_MAX_LENGTH: SegmentEndCause
SEGMENT_END_CAUSE_END_OF_INPUT: SegmentEndCause
SEGMENT_END_CAUSE_CLAUSE: SegmentEndCause

class AudioFormat(_message.Message):
    __slots__ = ("encoding", "sample_rate_hz")
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    encoding: AudioEncoding
    sample_rate_hz: int
    def __init__(self, encoding: _Optional[_Union[AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ...) -> None: ...

class SamplingOptions(_message.Message):
    __slots__ = ("temperature", "top_p", "repetition_penalty", "seed")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    repetition_penalty: float
    seed: int
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class SynthesisConfig(_message.Message):
    __slots__ = ("voice", "audio_format", "sampling", "normalize_text", "word_timestamps")
    VOICE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_TEXT_FIELD_NUMBER: _ClassVar[int]
    WORD_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    voice: str
    audio_format: AudioFormat
    sampling: SamplingOptions
    normalize_text: bool
    word_timestamps: bool
    def __init__(self, voice: _Optional[str] = ..., audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., sampling: _Optional[_Union[SamplingOptions, _Mapping]] = ..., normalize_text: bool = ..., word_timestamps: bool = ...) -> None: ...

class Flush(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class StreamingSynthesizeRequest(_message.Message):
    __slots__ = ("config", "text", "flush")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FIELD_NUMBER: _ClassVar[int]
    config: SynthesisConfig
    text: str
    flush: Flush
    def __init__(self, config: _Optional[_Union[SynthesisConfig, _Mapping]] = ..., text: _Optional[str] = ..., flush: _Optional[_Union[Flush, _Mapping]] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("audio", "segment_index", "sequence_number", "sample_offset", "num_samples")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    audio: bytes
    segment_index: int
    sequence_number: int
    sample_offset: int
    num_samples: int
    def __init__(self, audio: _Optional[bytes] = ..., segment_index: _Optional[int] = ..., sequence_number: _Optional[int] = ..., sample_offset: _Optional[int] = ..., num_samples: _Optional[int] = ...) -> None: ...

class SegmentStart(_message.Message):
    __slots__ = ("segment_index", "text", "sample_offset", "text_start", "text_end", "cause", "flush_id")
    SEGMENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TEXT_START_FIELD_NUMBER: _ClassVar[int]
    TEXT_END_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    FLUSH_ID_FIELD_NUMBER: _ClassVar[int]
    segment_index: int
    text: str
    sample_offset: int
    text_start: int
    text_end: int
    cause: SegmentEndCause
    flush_id: str
    def __init__(self, segment_index: _Optional[int] = ..., text: _Optional[str] = ..., sample_offset: _Optional[int] = ..., text_start: _Optional[int] = ..., text_end: _Optional[int] = ..., cause: _Optional[_Union[SegmentEndCause, str]] = ..., flush_id: _Optional[str] = ...) -> None: ...

class SegmentEnd(_message.Message):
    __slots__ = ("segment_index", "text", "num_samples", "num_tokens", "finish_reason", "text_start", "text_end", "cause", "flush_id")
    SEGMENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TEXT_START_FIELD_NUMBER: _ClassVar[int]
    TEXT_END_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    FLUSH_ID_FIELD_NUMBER: _ClassVar[int]
    segment_index: int
    text: str
    num_samples: int
    num_tokens: int
    finish_reason: str
    text_start: int
    text_end: int
    cause: SegmentEndCause
    flush_id: str
    def __init__(self, segment_index: _Optional[int] = ..., text: _Optional[str] = ..., num_samples: _Optional[int] = ..., num_tokens: _Optional[int] = ..., finish_reason: _Optional[str] = ..., text_start: _Optional[int] = ..., text_end: _Optional[int] = ..., cause: _Optional[_Union[SegmentEndCause, str]] = ..., flush_id: _Optional[str] = ...) -> None: ...

class WordTiming(_message.Message):
    __slots__ = ("text", "char_start", "char_end", "start_sample", "end_sample", "final")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAR_START_FIELD_NUMBER: _ClassVar[int]
    CHAR_END_FIELD_NUMBER: _ClassVar[int]
    START_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    END_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    text: str
    char_start: int
    char_end: int
    start_sample: int
    end_sample: int
    final: bool
    def __init__(self, text: _Optional[str] = ..., char_start: _Optional[int] = ..., char_end: _Optional[int] = ..., start_sample: _Optional[int] = ..., end_sample: _Optional[int] = ..., final: bool = ...) -> None: ...

class WordTimings(_message.Message):
    __slots__ = ("segment_index", "words", "final")
    SEGMENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    segment_index: int
    words: _containers.RepeatedCompositeFieldContainer[WordTiming]
    final: bool
    def __init__(self, segment_index: _Optional[int] = ..., words: _Optional[_Iterable[_Union[WordTiming, _Mapping]]] = ..., final: bool = ...) -> None: ...

class SynthesisSummary(_message.Message):
    __slots__ = ("session_id", "time_to_first_audio_ms", "audio_ms", "num_tokens", "num_segments", "num_samples", "wall_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    WALL_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    time_to_first_audio_ms: float
    audio_ms: float
    num_tokens: int
    num_segments: int
    num_samples: int
    wall_ms: float
    def __init__(self, session_id: _Optional[str] = ..., time_to_first_audio_ms: _Optional[float] = ..., audio_ms: _Optional[float] = ..., num_tokens: _Optional[int] = ..., num_segments: _Optional[int] = ..., num_samples: _Optional[int] = ..., wall_ms: _Optional[float] = ...) -> None: ...

class StreamingSynthesizeResponse(_message.Message):
    __slots__ = ("audio", "segment_start", "segment_end", "summary", "word_timings")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_START_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_END_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    WORD_TIMINGS_FIELD_NUMBER: _ClassVar[int]
    audio: AudioChunk
    segment_start: SegmentStart
    segment_end: SegmentEnd
    summary: SynthesisSummary
    word_timings: WordTimings
    def __init__(self, audio: _Optional[_Union[AudioChunk, _Mapping]] = ..., segment_start: _Optional[_Union[SegmentStart, _Mapping]] = ..., segment_end: _Optional[_Union[SegmentEnd, _Mapping]] = ..., summary: _Optional[_Union[SynthesisSummary, _Mapping]] = ..., word_timings: _Optional[_Union[WordTimings, _Mapping]] = ...) -> None: ...

class SynthesizeRequest(_message.Message):
    __slots__ = ("text", "voice", "audio_format", "sampling", "normalize_text", "word_timestamps")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_TEXT_FIELD_NUMBER: _ClassVar[int]
    WORD_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    text: str
    voice: str
    audio_format: AudioFormat
    sampling: SamplingOptions
    normalize_text: bool
    word_timestamps: bool
    def __init__(self, text: _Optional[str] = ..., voice: _Optional[str] = ..., audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., sampling: _Optional[_Union[SamplingOptions, _Mapping]] = ..., normalize_text: bool = ..., word_timestamps: bool = ...) -> None: ...

class SynthesizeResponse(_message.Message):
    __slots__ = ("audio", "segment_start", "segment_end", "summary", "word_timings")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_START_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_END_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    WORD_TIMINGS_FIELD_NUMBER: _ClassVar[int]
    audio: AudioChunk
    segment_start: SegmentStart
    segment_end: SegmentEnd
    summary: SynthesisSummary
    word_timings: WordTimings
    def __init__(self, audio: _Optional[_Union[AudioChunk, _Mapping]] = ..., segment_start: _Optional[_Union[SegmentStart, _Mapping]] = ..., segment_end: _Optional[_Union[SegmentEnd, _Mapping]] = ..., summary: _Optional[_Union[SynthesisSummary, _Mapping]] = ..., word_timings: _Optional[_Union[WordTimings, _Mapping]] = ...) -> None: ...

class ListVoicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Voice(_message.Message):
    __slots__ = ("name", "language", "is_default", "emotion_tags", "adapter", "reference")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    EMOTION_TAGS_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    language: str
    is_default: bool
    emotion_tags: _containers.RepeatedScalarFieldContainer[str]
    adapter: str
    reference: bool
    def __init__(self, name: _Optional[str] = ..., language: _Optional[str] = ..., is_default: bool = ..., emotion_tags: _Optional[_Iterable[str]] = ..., adapter: _Optional[str] = ..., reference: bool = ...) -> None: ...

class ListVoicesResponse(_message.Message):
    __slots__ = ("voices", "emotion_tags")
    VOICES_FIELD_NUMBER: _ClassVar[int]
    EMOTION_TAGS_FIELD_NUMBER: _ClassVar[int]
    voices: _containers.RepeatedCompositeFieldContainer[Voice]
    emotion_tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, voices: _Optional[_Iterable[_Union[Voice, _Mapping]]] = ..., emotion_tags: _Optional[_Iterable[str]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("serving", "backend", "model", "active_sessions", "active_generations", "waiting_generations", "free_slots", "total_slots", "max_batch_size", "sessions_total", "generations_total", "rejected_total", "tokens_total", "steps_total", "grammar_violations", "audio_seconds_total", "uptime_seconds", "idle_sessions", "max_sessions", "max_concurrent_streams", "idle_timeout_seconds", "stalled_consumer_timeout_seconds", "sessions_refused_total", "idle_timeouts_total", "stalled_timeouts_total", "failed_generations_total", "server_version", "api_version")
    SERVING_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    WAITING_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SLOTS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GENERATIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REJECTED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STEPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IDLE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_STREAMS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STALLED_CONSUMER_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_REFUSED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STALLED_TIMEOUTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FAILED_GENERATIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    serving: bool
    backend: str
    model: str
    active_sessions: int
    active_generations: int
    waiting_generations: int
    free_slots: int
    total_slots: int
    max_batch_size: int
    sessions_total: int
    generations_total: int
    rejected_total: int
    tokens_total: int
    steps_total: int
    grammar_violations: int
    audio_seconds_total: float
    uptime_seconds: float
    idle_sessions: int
    max_sessions: int
    max_concurrent_streams: int
    idle_timeout_seconds: float
    stalled_consumer_timeout_seconds: float
    sessions_refused_total: int
    idle_timeouts_total: int
    stalled_timeouts_total: int
    failed_generations_total: int
    server_version: str
    api_version: str
    def __init__(self, serving: bool = ..., backend: _Optional[str] = ..., model: _Optional[str] = ..., active_sessions: _Optional[int] = ..., active_generations: _Optional[int] = ..., waiting_generations: _Optional[int] = ..., free_slots: _Optional[int] = ..., total_slots: _Optional[int] = ..., max_batch_size: _Optional[int] = ..., sessions_total: _Optional[int] = ..., generations_total: _Optional[int] = ..., rejected_total: _Optional[int] = ..., tokens_total: _Optional[int] = ..., steps_total: _Optional[int] = ..., grammar_violations: _Optional[int] = ..., audio_seconds_total: _Optional[float] = ..., uptime_seconds: _Optional[float] = ..., idle_sessions: _Optional[int] = ..., max_sessions: _Optional[int] = ..., max_concurrent_streams: _Optional[int] = ..., idle_timeout_seconds: _Optional[float] = ..., stalled_consumer_timeout_seconds: _Optional[float] = ..., sessions_refused_total: _Optional[int] = ..., idle_timeouts_total: _Optional[int] = ..., stalled_timeouts_total: _Optional[int] = ..., failed_generations_total: _Optional[int] = ..., server_version: _Optional[str] = ..., api_version: _Optional[str] = ...) -> None: ...
