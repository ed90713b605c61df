"""The asyncio client of a running textproc service: ``TextClient.connect(runtime_dir)``.

Parts, one job each: ``textclient`` (TextClient: connect, the public calls and a stream's
generation loop, close), ``streams`` (what a stream waits on: its output under the Accepted
deadline, its detokenizer shards; aborts of streams closed early), ``endpoints`` (reading ``endpoints.json``: protocol check, CURVE keys),
``readers`` (one task per socket filling what arrives), ``inflight`` (the request tables and
the choice of worker), ``events`` (TextEvent, Usage, errors from Failure kinds).
"""

from __future__ import annotations

from textproc.client.events import TextEvent, Usage
from textproc.client.textclient import DEFAULT_CALL_TIMEOUT_S, TextClient

__all__ = ["TextClient", "TextEvent", "Usage", "DEFAULT_CALL_TIMEOUT_S"]
