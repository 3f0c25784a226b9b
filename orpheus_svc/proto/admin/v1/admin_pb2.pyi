from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AdapterState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADAPTER_STATE_UNSPECIFIED: _ClassVar[AdapterState]
    ADAPTER_STATE_LOADING: _ClassVar[AdapterState]
    ADAPTER_STATE_LOADED: _ClassVar[AdapterState]
    ADAPTER_STATE_DRAINING: _ClassVar[AdapterState]

class ReferenceVoiceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REFERENCE_VOICE_STATE_UNSPECIFIED: _ClassVar[ReferenceVoiceState]
    REFERENCE_VOICE_STATE_LOADING: _ClassVar[ReferenceVoiceState]
    REFERENCE_VOICE_STATE_LOADED: _ClassVar[ReferenceVoiceState]
    REFERENCE_VOICE_STATE_DRAINING: _ClassVar[ReferenceVoiceState]
ADAPTER_STATE_UNSPECIFIED: AdapterState
ADAPTER_STATE_LOADING: AdapterState
ADAPTER_STATE_LOADED: AdapterState
ADAPTER_STATE_DRAINING: AdapterState
REFERENCE_VOICE_STATE_UNSPECIFIED: ReferenceVoiceState
REFERENCE_VOICE_STATE_LOADING: ReferenceVoiceState
REFERENCE_VOICE_STATE_LOADED: ReferenceVoiceState
REFERENCE_VOICE_STATE_DRAINING: ReferenceVoiceState

class Adapter(_message.Message):
    __slots__ = ("name", "path", "rank", "voices", "open_sessions", "state", "slot")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    VOICES_FIELD_NUMBER: _ClassVar[int]
    OPEN_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    rank: int
    voices: _containers.RepeatedScalarFieldContainer[str]
    open_sessions: int
    state: AdapterState
    slot: int
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ..., rank: _Optional[int] = ..., voices: _Optional[_Iterable[str]] = ..., open_sessions: _Optional[int] = ..., state: _Optional[_Union[AdapterState, str]] = ..., slot: _Optional[int] = ...) -> None: ...

class LoadAdapterRequest(_message.Message):
    __slots__ = ("name", "path", "voices")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOICES_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    voices: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ..., voices: _Optional[_Iterable[str]] = ...) -> None: ...

class LoadAdapterResponse(_message.Message):
    __slots__ = ("adapter",)
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    adapter: Adapter
    def __init__(self, adapter: _Optional[_Union[Adapter, _Mapping]] = ...) -> None: ...

class ListAdaptersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAdaptersResponse(_message.Message):
    __slots__ = ("adapters", "capacity", "max_rank", "adapter_dirs")
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MAX_RANK_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_DIRS_FIELD_NUMBER: _ClassVar[int]
    adapters: _containers.RepeatedCompositeFieldContainer[Adapter]
    capacity: int
    max_rank: int
    adapter_dirs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, adapters: _Optional[_Iterable[_Union[Adapter, _Mapping]]] = ..., capacity: _Optional[int] = ..., max_rank: _Optional[int] = ..., adapter_dirs: _Optional[_Iterable[str]] = ...) -> None: ...

class UnloadAdapterRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UnloadAdapterResponse(_message.Message):
    __slots__ = ("adapter", "freed")
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    FREED_FIELD_NUMBER: _ClassVar[int]
    adapter: Adapter
    freed: bool
    def __init__(self, adapter: _Optional[_Union[Adapter, _Mapping]] = ..., freed: bool = ...) -> None: ...

class ReferenceVoice(_message.Message):
    __slots__ = ("name", "language", "transcript", "clip", "seconds", "audio_tokens", "prefix_tokens", "open_sessions", "state")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    CLIP_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OPEN_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    language: str
    transcript: str
    clip: str
    seconds: float
    audio_tokens: int
    prefix_tokens: int
    open_sessions: int
    state: ReferenceVoiceState
    def __init__(self, name: _Optional[str] = ..., language: _Optional[str] = ..., transcript: _Optional[str] = ..., clip: _Optional[str] = ..., seconds: _Optional[float] = ..., audio_tokens: _Optional[int] = ..., prefix_tokens: _Optional[int] = ..., open_sessions: _Optional[int] = ..., state: _Optional[_Union[ReferenceVoiceState, str]] = ...) -> None: ...

class LoadReferenceVoiceRequest(_message.Message):
    __slots__ = ("name", "language", "transcript", "clip_path", "clip_audio")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    CLIP_PATH_FIELD_NUMBER: _ClassVar[int]
    CLIP_AUDIO_FIELD_NUMBER: _ClassVar[int]
    name: str
    language: str
    transcript: str
    clip_path: str
    clip_audio: bytes
    def __init__(self, name: _Optional[str] = ..., language: _Optional[str] = ..., transcript: _Optional[str] = ..., clip_path: _Optional[str] = ..., clip_audio: _Optional[bytes] = ...) -> None: ...

class LoadReferenceVoiceResponse(_message.Message):
    __slots__ = ("voice",)
    VOICE_FIELD_NUMBER: _ClassVar[int]
    voice: ReferenceVoice
    def __init__(self, voice: _Optional[_Union[ReferenceVoice, _Mapping]] = ...) -> None: ...

class ListReferenceVoicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListReferenceVoicesResponse(_message.Message):
    __slots__ = ("voices", "reference_dirs", "min_clip_seconds", "max_clip_seconds", "max_transcript_chars", "max_clip_audio_bytes", "max_clip_file_bytes")
    VOICES_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_DIRS_FIELD_NUMBER: _ClassVar[int]
    MIN_CLIP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_CLIP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_TRANSCRIPT_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_CLIP_AUDIO_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_CLIP_FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    voices: _containers.RepeatedCompositeFieldContainer[ReferenceVoice]
    reference_dirs: _containers.RepeatedScalarFieldContainer[str]
    min_clip_seconds: float
    max_clip_seconds: float
    max_transcript_chars: int
    max_clip_audio_bytes: int
    max_clip_file_bytes: int
    def __init__(self, voices: _Optional[_Iterable[_Union[ReferenceVoice, _Mapping]]] = ..., reference_dirs: _Optional[_Iterable[str]] = ..., min_clip_seconds: _Optional[float] = ..., max_clip_seconds: _Optional[float] = ..., max_transcript_chars: _Optional[int] = ..., max_clip_audio_bytes: _Optional[int] = ..., max_clip_file_bytes: _Optional[int] = ...) -> None: ...

class UnloadReferenceVoiceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UnloadReferenceVoiceResponse(_message.Message):
    __slots__ = ("voice", "freed")
    VOICE_FIELD_NUMBER: _ClassVar[int]
    FREED_FIELD_NUMBER: _ClassVar[int]
    voice: ReferenceVoice
    freed: bool
    def __init__(self, voice: _Optional[_Union[ReferenceVoice, _Mapping]] = ..., freed: bool = ...) -> None: ...
