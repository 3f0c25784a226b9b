"""Generated protobuf/gRPC stubs for the orpheus.admin API (see proto/; scripts/gen-proto.sh)."""
