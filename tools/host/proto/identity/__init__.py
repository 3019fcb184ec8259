"""Generated from identity/ClaimsIdentityRpc.proto (tools/host/generate_proto.py)."""
