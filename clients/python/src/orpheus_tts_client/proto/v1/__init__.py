"""Generated protobuf/gRPC stubs for orpheus.tts.v1 (see proto/; scripts/gen-proto.sh)."""
