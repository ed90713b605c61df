"""Every frame textproc sends between processes: msgspec Structs, MessagePack on the wire.

The public face of the wire format: every frame, union, limit and helper is importable from
here (``from textproc.protocol import Submit``); the parts below are split by reason to change:

* ``version``: ``PROTOCOL_VERSION`` and what each bump changed (the one place it is written);
* ``limits``: default limits and finish reasons;
* ``packing``: ids as packed uint32, logprobs as packed float32, ``logprob_rows``;
* ``engine_frames``: engine-in / engine-out, the only frames an engine sees, ``step_entries``;
* ``worker_frames``: worker-i (client requests and answers, peer workers' shares);
* ``detokenizer_frames``: detok-in (``Submit``) and detok-front (client streams, aborts);
* ``control_frames``: the supervisor's control and events sockets.

Must not import the text core (workers translate frames into core calls). Rules (docs/style.md):
tagged unions with ``array_like=True``; the tag is the class name and never changes once
shipped; new fields go at the end with defaults; never reorder or retype a field; bump
PROTOCOL_VERSION on any change.

Sockets and the union each one decodes (docs/architecture.md has the full picture):

    engine-in   PUSH   (textproc binds)    out: EngineInFrame (the engine decodes it)
    engine-out  PULL   (textproc binds)    in: EngineOutFrame
    worker-i    ROUTER (worker binds)      in: WorkerInFrame           out: WorkerOutFrame
                (peer workers connect a DEALER: in EncodePart, out EncodedPart = PeerOutFrame)
    detok-in    PULL   (detokenizer binds) in: Submit, IndexDone
    detok-front ROUTER (detokenizer binds) in: FrontInFrame            out: FrontOutFrame
    control     PULL   (supervisor binds)  in: Ready (children announce themselves)
    events      PUB    (supervisor binds)  out: EventFrame

On the two ROUTER sockets the peer's routing id IS the client id: workers put it into
Submit.client_id, so a client can only ever receive outputs for requests it sent itself.
Token ids of prompts travel packed (``pack_ids``: little-endian uint32), not as lists of ints.
"""

from __future__ import annotations

# Each part's __all__ is the one list of its public names; this face re-exports them all
# (the asyncio/__init__.py way), so a name added to a part is importable from here at once.
from textproc.protocol import (
    control_frames,
    detokenizer_frames,
    engine_frames,
    limits,
    packing,
    version,
    worker_frames,
)
from textproc.protocol.control_frames import *  # noqa: F403
from textproc.protocol.detokenizer_frames import *  # noqa: F403
from textproc.protocol.engine_frames import *  # noqa: F403
from textproc.protocol.limits import *  # noqa: F403
from textproc.protocol.packing import *  # noqa: F403
from textproc.protocol.version import *  # noqa: F403
from textproc.protocol.worker_frames import *  # noqa: F403

__all__ = (version.__all__ + limits.__all__ + packing.__all__ + engine_frames.__all__
           + worker_frames.__all__ + detokenizer_frames.__all__ + control_frames.__all__)
