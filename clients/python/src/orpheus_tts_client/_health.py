"""grpc.health.v1.Health/Check without the grpcio-health-checking dependency.

The two tiny messages are built from a descriptor in a private pool, so this neither needs
that package nor clashes with it when both are loaded in one process.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

CHECK_METHOD = "/grpc.health.v1.Health/Check"

# HealthCheckResponse.ServingStatus
STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _messages():
    f = descriptor_pb2.FileDescriptorProto(name="orpheus_tts_client/health.proto",
                                           package="grpc.health.v1", syntax="proto3")
    req = f.message_type.add(name="HealthCheckRequest")
    req.field.add(name="service", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    resp = f.message_type.add(name="HealthCheckResponse")
    # Decoded as a plain int32 so that a status added later does not fail the parse.
    resp.field.add(name="status", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                   label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    # Add() returns the file descriptor on the upb and C++ implementations but None on the
    # pure-Python one (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python): look it up instead.
    pool.Add(f)
    fd = pool.FindFileByName(f.name)
    return (message_factory.GetMessageClass(fd.message_types_by_name["HealthCheckRequest"]),
            message_factory.GetMessageClass(fd.message_types_by_name["HealthCheckResponse"]))


HealthCheckRequest, HealthCheckResponse = _messages()


def serialize_request(service: str) -> bytes:
    return HealthCheckRequest(service=service).SerializeToString()


def status_name(raw: bytes) -> str:
    status = HealthCheckResponse.FromString(raw).status
    return STATUS_NAMES.get(status, f"STATUS_{status}")
