"""Binding annotations the Functions Python runtime accepts, in one place."""

import typing

# A queue output binding that sends one message per string. The runtime validates a parameter's annotation at
# indexing and refuses the PEP 585 form `func.Out[list[str]]` ("invalid non-type annotation"), which makes it load
# none of the app's functions; it accepts `typing.List[str]`. UP006 would rewrite this line into the refused form.
QueueMessages = typing.List[str]  # noqa: UP006
