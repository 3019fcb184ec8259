"""The test suite. Importing it (every test module does) checks every HTTP answer the app gives from then on against
openapi.yaml (tests/openapi_responses.py)."""

from tests import openapi_responses

openapi_responses.install()
