"""Query arguments are read as sent and once (SandboxHandlerBase.query_argument): tornado's
get_argument kept the last of several values (``?offset=0&offset=100`` read from 100) and
stripped spaces, and a number of thousands of digits made int() raise (a 500)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import pytest

from tests.server_extension.conftest import Fetch, api

# A well-formed sandbox id nobody has: each argument is refused before any lookup.
NOBODYS = "0123456789ab"


@pytest.mark.parametrize(
    ("path", "query", "says"),
    [
        (("network", "audit"), "limit=" + "1" * 5000, "limit must be a whole number"),
        (("network", "audit"), "limit=5&limit=6", "limit is given 2 times"),
        (("network", "requests"), "follow=true&follow=false", "follow is given 2 times"),
        (("commands", "c1", "output"), "offset=0&offset=100", "offset is given 2 times"),
        (("commands", "c1", "output"), "offset=%200", "offset must be an integer"),
    ],
)
async def test_a_query_argument_is_read_as_sent_and_once(
    jp_fetch: Fetch, path: tuple[str, ...], query: str, says: str
) -> None:
    status, error = await api(jp_fetch, "GET", NOBODYS, *path, params=_query(query))
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert says in error["message"], error


def _query(text: str) -> Any:
    """``text`` as jp_fetch's params: a list of pairs keeps a name given twice."""
    return parse_qsl(text, keep_blank_values=True)
