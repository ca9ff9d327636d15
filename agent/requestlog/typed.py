"""The typed tail decoder: the stage times of many ``Completed request:`` lines in one msgspec call.

The general parser (:meth:`agent.requestlog.parse.LineParser.parse`) reads a line's stage times
from its tail object, the text from the line's last ``,"connection":`` to the first
``,"securityProtocol":`` after it, wrapped in braces and parsed by orjson. :func:`decode_tails`
takes those same texts of a block's lines (as :func:`agent.requestlog.bulk.scan_lines` slices
them) and decodes them all with one compiled :class:`msgspec.json.Decoder` call into
:class:`Tail` Structs that hold only the connection and the seven stage times: no token is split
or looked up in Python, no dict is built per line.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from agent.requestlog.parse import MAX_STAGE_MS

# A usable stage time as the general path accepts it: a JSON number (not a boolean, not a
# string), non-negative, and below an eighth of MAX_STAGE_MS so that seven of them sum within
# it. JSON ints stay ints and floats floats, as orjson gives them.
_LIMIT = MAX_STAGE_MS / 8
Stage = Annotated[int, msgspec.Meta(ge=0, lt=int(_LIMIT))] | Annotated[float, msgspec.Meta(ge=0, lt=_LIMIT)]


class Tail(msgspec.Struct, gc=False):
    """A line's tail object: what the windows need of a usual line but its type and stamp.
    Not tracked by the garbage collector (it holds a str and numbers only, no cycle can go
    through it): a block makes hundreds at once, which would otherwise trigger collections."""

    connection: str
    totalTimeMs: Stage
    requestQueueTimeMs: Stage
    localTimeMs: Stage
    remoteTimeMs: Stage
    throttleTimeMs: Stage
    responseQueueTimeMs: Stage
    sendTimeMs: Stage


_DECODE = msgspec.json.Decoder(list[Tail]).decode
_JOIN = b'},{"'


def decode_tails(tails: list[bytes]) -> list[Tail] | None:
    """The :class:`Tail` of each of ``tails`` (each ``connection":…`` up to, not including, the
    ``,"securityProtocol":`` after it: the general parser's tail object without its ``{"`` and
    ``}``), in order; None unless every one is certainly read as the general parser reads it.

    The tails are joined into one JSON array of objects and decoded at once. The text of each
    object is exactly the general parser's tail text, and msgspec reads it as orjson does (the
    last of a repeated key, ints as ints, the same JSON grammar); it is stricter where they could
    differ (a connection that is not a string, a stage time that is a boolean, negative or too
    large: the general path then says why). Objects are told apart by the joins only: no tail
    may hold a brace, and the array must hold one object per tail (a join swallowed by a string
    would leave fewer)."""
    n = len(tails)
    text = b'[{"' + _JOIN.join(tails) + b"}]"
    if text.count(b"{") != n or text.count(b"}") != n:
        return None
    try:
        rows = _DECODE(text)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):  # not UTF-8: msgspec's own
        return None
    return rows if len(rows) == n else None
