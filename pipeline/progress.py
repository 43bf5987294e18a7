"""Progress bars that stay readable in logs.

On a terminal, :func:`bar` is a normal ``tqdm`` bar. When stderr is not a terminal (Airflow task
logs, CI, ``nohup``), tqdm would still redraw its bar with carriage returns, which a log file
keeps as one ever-growing line; here each redraw becomes one plain line instead, at most every
``log_interval_s`` seconds (plus the final state), e.g.::

    memory:  41%|####1     | 7/17 [00:52<01:14,  7.45s/req]
"""
from __future__ import annotations

import re
import sys
from typing import Any, TextIO

from tqdm import tqdm

LOG_INTERVAL_S = 30.0  # a line every 30 s keeps a long LLM stage's log short but alive


class _LineWriter:
    """A file for tqdm that turns each carriage-return redraw into one newline-ended line."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self._last_count = None  # "n/total" of the last line: closing redraws the last state

    def write(self, s: str) -> None:
        line = s.replace("\r", "").rstrip()
        count = re.search(r"\| *(\d+/\S+) ", line)
        count = count.group(1) if count else None
        if line and (count is None or count != self._last_count):
            self.stream.write(line + "\n")
            self._last_count = count

    def flush(self) -> None:
        self.stream.flush()


def bar(total: int | None, desc: str, unit: str = "it", disable: bool = False,
        log_interval_s: float = LOG_INTERVAL_S, stream: TextIO | None = None, **kwargs: Any) -> tqdm:
    """A ``tqdm`` bar over ``total`` items (see the module docstring for the non-terminal form).

    ``stream`` defaults to ``sys.stderr``; ``log_interval_s`` is the minimum time between lines
    when it is not a terminal (``0``: a line per update, for slow steps such as GRPO's).
    """
    stream = stream or sys.stderr
    if hasattr(stream, "isatty") and stream.isatty():
        return tqdm(total=total, desc=desc, unit=unit, disable=disable, file=stream, **kwargs)
    kwargs.pop("mininterval", None)
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, file=_LineWriter(stream), ascii=True,
                mininterval=log_interval_s, maxinterval=max(log_interval_s, 1.0), dynamic_ncols=False, ncols=100,
                **kwargs)
