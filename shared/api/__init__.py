"""Request parsing every HTTP function shares: bodies (size, media type, strict JSON) and the ids a route names."""
