"""Generated from shared/NullableTypes.proto (tools/host/generate_proto.py)."""
