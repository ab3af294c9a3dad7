"""Token ids from a list checked and packed in one C pass, without numpy.

The cache's keys (keys.py) and the scenario loader, which must stay light enough for
the workbench's first frame, check token lists the same way: ``array('I')`` refuses
negatives, floats, strings and ids past 32 bits by itself; a packed id's high bit then
means >= 2**31, and only the ids whose low byte is 0 or 1 are looked at again, for a
bool.
"""

from __future__ import annotations

import sys
from array import array

from .errors import InvalidKeyError

TOKEN_BYTES = 4  # int32 per token
MAX_TOKEN_ID = 2**31 - 1
_TOP_BYTE = slice(3, None, 4) if sys.byteorder == "little" else slice(0, None, 4)  # each token's high byte
_LOW_BYTE = slice(0, None, 4) if sys.byteorder == "little" else slice(3, None, 4)  # True and False: 1, 0


def pack_token_list(token_ids: list | tuple) -> bytes:
    """A list or tuple of token ids (non-negative ints below 2**31) as packed bytes."""
    try:
        data = array("I", token_ids).tobytes()
    except (TypeError, OverflowError):
        raise bad_tokens(token_ids) from None
    if not data[_TOP_BYTE].isascii() or _holds_a_bool(token_ids, data):
        raise bad_tokens(token_ids)
    return data


def top_bits_clear(data: bytes) -> bool:
    """Every packed id is below 2**31 (as int32, none is negative)."""
    return data[_TOP_BYTE].isascii()


def _holds_a_bool(token_ids, data: bytes) -> bool:
    """Whether a token was True or False: only the tokens whose low byte is 0 or 1 (a
    C-speed byte search, a few in a thousand) are looked at."""
    low_bytes = data[_LOW_BYTE]
    for byte in (b"\x00", b"\x01"):
        at = low_bytes.find(byte)
        while at >= 0:
            if type(token_ids[at]) is bool:
                return True
            at = low_bytes.find(byte, at + 1)
    return False


def bad_tokens(token_ids) -> InvalidKeyError:
    """The error naming the first bad id (the slow path: only when one is bad)."""
    for tok in token_ids:
        if isinstance(tok, bool) or not isinstance(tok, int) or not 0 <= tok <= MAX_TOKEN_ID:
            if isinstance(tok, int) and not isinstance(tok, bool) and tok < 0:
                return InvalidKeyError(f"token ids must be non-negative (got {tok})")
            return InvalidKeyError(f"token ids must be non-negative ints below 2**31 (got {tok!r})")
    return InvalidKeyError("token ids must be non-negative ints below 2**31")
