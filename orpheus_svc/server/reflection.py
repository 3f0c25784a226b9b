"""gRPC server reflection under both `grpc.reflection.v1` and `grpc.reflection.v1alpha`.

grpcio-reflection's servicer (1.85) is not enough for the tools our users debug and
load-test with: it serves only v1alpha, and it answers NOT_FOUND for a method's full name
(`file_containing_symbol: orpheus.tts.v1.TTSService.Synthesize`) because protobuf's
descriptor pool does not index methods as symbols (grpc/grpc#34743). ghz and
`grpcurl describe <method>` ask exactly that, so both fail with reflection alone
(bojand/ghz#419). This servicer resolves a method name to its service's file and
answers on both versions.

The two versions' messages are the same on the wire (same fields, same numbers; only the
proto package differs), so both are served with grpcio-reflection's v1alpha message classes.
The v1 service's own descriptor is built from v1alpha's (package renamed) in a private pool,
so `grpcurl describe grpc.reflection.v1.ServerReflection` works without adding a file to
protobuf's default pool that a later import of a real v1 module would collide with.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection_pb2 as pb

V1ALPHA = "grpc.reflection.v1alpha.ServerReflection"
V1 = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _v1_pool() -> descriptor_pool.DescriptorPool:
    """A pool holding only grpc/reflection/v1/reflection.proto, made from v1alpha's."""
    fdp = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(fdp)
    old, new = ".grpc.reflection.v1alpha.", ".grpc.reflection.v1."
    fdp.name, fdp.package = _V1_FILE, "grpc.reflection.v1"
    fdp.options.java_package = "io.grpc.reflection.v1"
    fdp.options.go_package = "google.golang.org/grpc/reflection/grpc_reflection_v1"
    for message in fdp.message_type:
        for field in message.field:
            if field.HasField("type_name"):  # set on message fields only
                field.type_name = field.type_name.replace(old, new)
    for method in fdp.service[0].method:
        method.input_type = method.input_type.replace(old, new)
        method.output_type = method.output_type.replace(old, new)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return pool


class DescriptorIndex:
    """Finds the file that defines a symbol or has a file name, in several pools in turn.

    Unlike `DescriptorPool.FindFileContainingSymbol`, a method's full name
    (`package.Service.Method`) resolves to its service's file."""

    def __init__(self, pools: Iterable[descriptor_pool.DescriptorPool]) -> None:
        self.pools = tuple(pools)

    def file_by_name(self, name: str) -> FileDescriptor | None:
        return self._first(lambda pool: pool.FindFileByName(name))

    def file_containing_symbol(self, symbol: str) -> FileDescriptor | None:
        found = self._first(lambda pool: pool.FindFileContainingSymbol(symbol))
        if found is None and "." in symbol:
            service, _, method = symbol.rpartition(".")
            found = self._first(lambda pool: _method_file(pool, service, method))
        return found

    def file_containing_extension(self, message: str, number: int) -> FileDescriptor | None:
        return self._first(lambda pool: pool.FindExtensionByNumber(
            pool.FindMessageTypeByName(message), number).file)

    def extension_numbers(self, message: str) -> list[int] | None:
        return self._first(lambda pool: sorted(
            e.number for e in pool.FindAllExtensions(pool.FindMessageTypeByName(message))))

    def _first(self, find):
        for pool in self.pools:
            try:
                return find(pool)
            except KeyError:
                continue
        return None


def _method_file(pool: descriptor_pool.DescriptorPool, service: str, method: str):
    found = pool.FindServiceByName(service)
    if method not in found.methods_by_name:
        raise KeyError(method)
    return found.file


def file_and_dependencies(file: FileDescriptor) -> list[bytes]:
    """The serialized FileDescriptorProtos of `file` (first, as the protocol asks) and of
    everything it imports, transitively, each once."""
    seen: dict[str, FileDescriptor] = {}
    todo = [file]
    while todo:
        f = todo.pop()
        if f.name not in seen:
            seen[f.name] = f
            todo.extend(f.dependencies)
    out = []
    for f in seen.values():
        proto = descriptor_pb2.FileDescriptorProto()
        f.CopyToProto(proto)
        out.append(proto.SerializeToString())
    return out


class ReflectionServicer:
    """`ServerReflectionInfo` for a fixed list of service names (both versions share it)."""

    def __init__(self, service_names: Iterable[str], index: DescriptorIndex | None = None) -> None:
        self.service_names = tuple(sorted(set(service_names) | {V1, V1ALPHA}))
        self.index = index or DescriptorIndex([descriptor_pool.Default(), _v1_pool()])

    def answer(self, request: pb.ServerReflectionRequest) -> pb.ServerReflectionResponse:
        """The response to one request (a missing symbol or file is NOT_FOUND in the
        response; the stream goes on, as the protocol says)."""
        kind = request.WhichOneof("message_request")
        if kind == "list_services":
            return pb.ServerReflectionResponse(
                original_request=request, list_services_response=pb.ListServiceResponse(
                    service=[pb.ServiceResponse(name=n) for n in self.service_names]))
        if kind == "all_extension_numbers_of_type":
            numbers = self.index.extension_numbers(request.all_extension_numbers_of_type)
            if numbers is None:
                return _error(request, grpc.StatusCode.NOT_FOUND)
            return pb.ServerReflectionResponse(
                original_request=request,
                all_extension_numbers_response=pb.ExtensionNumberResponse(
                    base_type_name=request.all_extension_numbers_of_type,
                    extension_number=numbers))
        if kind == "file_by_filename":
            file = self.index.file_by_name(request.file_by_filename)
        elif kind == "file_containing_symbol":
            file = self.index.file_containing_symbol(request.file_containing_symbol)
        elif kind == "file_containing_extension":
            ext = request.file_containing_extension
            file = self.index.file_containing_extension(ext.containing_type, ext.extension_number)
        else:
            return _error(request, grpc.StatusCode.INVALID_ARGUMENT)
        if file is None:
            return _error(request, grpc.StatusCode.NOT_FOUND)
        return pb.ServerReflectionResponse(
            original_request=request, file_descriptor_response=pb.FileDescriptorResponse(
                file_descriptor_proto=file_and_dependencies(file)))

    async def ServerReflectionInfo(self, requests: AsyncIterator[pb.ServerReflectionRequest],
                                   context) -> AsyncIterator[pb.ServerReflectionResponse]:
        async for request in requests:
            yield self.answer(request)


def _error(request, code: grpc.StatusCode) -> pb.ServerReflectionResponse:
    return pb.ServerReflectionResponse(original_request=request, error_response=pb.ErrorResponse(
        error_code=code.value[0], error_message=code.value[1]))


def add_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> ReflectionServicer:
    """Serve reflection for `service_names` (plus both reflection services) on `server`,
    under grpc.reflection.v1 and grpc.reflection.v1alpha."""
    servicer = ReflectionServicer(service_names)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=pb.ServerReflectionRequest.FromString,
        response_serializer=pb.ServerReflectionResponse.SerializeToString)
    server.add_generic_rpc_handlers(tuple(
        grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler})
        for name in (V1, V1ALPHA)))
    return servicer
