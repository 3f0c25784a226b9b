"""Generated protobuf/gRPC stubs for orpheus.admin.v1 (see proto/; scripts/gen-proto.sh)."""
