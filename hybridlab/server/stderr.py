"""A logging handler for command-line and server processes that log to standard error."""

from __future__ import annotations

import logging
import sys


class StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record is emitted, not to the stream of the moment
    it was created: in-process CLI calls under a capturing test runner otherwise leave the root
    logger writing to a closed stream."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass
