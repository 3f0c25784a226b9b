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
ADAPTER_STATE_UNSPECIFIED: AdapterState
ADAPTER_STATE_LOADING: AdapterState
ADAPTER_STATE_LOADED: AdapterState
ADAPTER_STATE_DRAINING: AdapterState

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
