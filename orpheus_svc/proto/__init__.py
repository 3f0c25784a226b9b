"""Generated protobuf/gRPC stubs of the APIs the server owns (see proto/; scripts/gen-proto.sh)."""
