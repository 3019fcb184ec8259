"""The Functions language-worker protocol: the vendored proto files and the classes generated from them (README.md)."""
