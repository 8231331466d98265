"""Notebook runs (nbmake): wait for kernel replies in 1 s slices.

Under pytest-xdist on a busy 2-core machine a notebook now and then sat with
its kernel idle while nbclient waited minutes for an ``execute_reply`` that the
kernel had already sent (its iopub ``idle`` status had arrived; waking the
client's event loop by hand let it read the reply at once).  That is a missed
readiness wake-up in the client's zmq/asyncio poll, not a numlab problem, and
its root cause was not pinned down.  Re-polling in short slices makes such a
miss cost at most a second; a message that is really missing still fails the
cell after nbmake's timeout, as before.
"""

from __future__ import annotations

import time
from queue import Empty

from jupyter_client.channels import AsyncZMQSocketChannel

_SLICE = 1.0  # seconds
_get_msg = AsyncZMQSocketChannel.get_msg


async def _get_msg_in_slices(self, timeout=None):
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = _SLICE if deadline is None else max(0.0, min(_SLICE, deadline - time.monotonic()))
        try:
            return await _get_msg(self, timeout=left)
        except Empty:
            if deadline is not None and time.monotonic() >= deadline:
                raise


AsyncZMQSocketChannel.get_msg = _get_msg_in_slices
