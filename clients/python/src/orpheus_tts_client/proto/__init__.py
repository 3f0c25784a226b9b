"""Generated protobuf/gRPC stubs for the orpheus.tts API (see proto/; scripts/gen-proto.sh)."""
