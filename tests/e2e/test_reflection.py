"""Server reflection as ghz and grpcurl use it (issue 29): a method's full name resolves to
its file, on grpc.reflection.v1 and on v1alpha, from a live server.

grpcio-reflection ships a client stub for v1alpha only; v1 is asked through the same
messages on v1's method path (the two versions are the same on the wire)."""

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection_pb2 as pb
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

PATHS = {"v1": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
         "v1alpha": "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}


def ask(channel, version, *requests):
    call = channel.stream_stream(PATHS[version],
                                 request_serializer=pb.ServerReflectionRequest.SerializeToString,
                                 response_deserializer=pb.ServerReflectionResponse.FromString)
    return list(call(iter(requests), timeout=10))


def first_file(response) -> descriptor_pb2.FileDescriptorProto:
    assert response.WhichOneof("message_response") == "file_descriptor_response", response
    return descriptor_pb2.FileDescriptorProto.FromString(
        response.file_descriptor_response.file_descriptor_proto[0])


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_a_method_name_resolves_to_its_services_file(server, version):
    (resp,) = ask(server.channel, version, pb.ServerReflectionRequest(
        file_containing_symbol="orpheus.tts.v1.TTSService.Synthesize"))
    f = first_file(resp)
    assert f.name == "orpheus/tts/v1/tts.proto"
    (service,) = [s for s in f.service if s.name == "TTSService"]
    assert "Synthesize" in [m.name for m in service.method]


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_an_unknown_method_is_not_found_and_the_stream_goes_on(server, version):
    missing, listing = ask(server.channel, version,
                           pb.ServerReflectionRequest(
                               file_containing_symbol="orpheus.tts.v1.TTSService.Nope"),
                           pb.ServerReflectionRequest(list_services=""))
    assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
    names = {s.name for s in listing.list_services_response.service}
    assert {"orpheus.tts.v1.TTSService", "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names


def test_v1_describes_its_own_service(server):
    (resp,) = ask(server.channel, "v1", pb.ServerReflectionRequest(
        file_containing_symbol="grpc.reflection.v1.ServerReflection.ServerReflectionInfo"))
    f = first_file(resp)
    assert (f.name, f.package) == ("grpc/reflection/v1/reflection.proto", "grpc.reflection.v1")
    (method,) = f.service[0].method
    assert method.input_type == ".grpc.reflection.v1.ServerReflectionRequest"


def test_grpcs_own_reflection_client_finds_the_method(server):
    """grpcio-reflection's descriptor database (its v1alpha client) builds a pool in which
    the method, its request type and its streaming shape are known."""
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(server.channel))
    method = pool.FindMethodByName("orpheus.tts.v1.TTSService.StreamingSynthesize")
    assert method.input_type.full_name == "orpheus.tts.v1.StreamingSynthesizeRequest"
    assert method.client_streaming and method.server_streaming
