"""Server-sent events, read incrementally: what an OpenAI-compatible server streams.

The format (WHATWG HTML, "Server-sent events", the event stream's interpretation): a stream
of lines ended by CRLF, LF or CR; a blank line dispatches the event; `data:` lines (one
leading space after the colon dropped) append to the event's data, joined by LF; a line
starting with `:` is a comment (servers send them as keep-alives); other fields (`event:`,
`id:`, `retry:`) are kept out of the data. OpenAI's streams end with the event `data: [DONE]`.

`SseParser.feed` takes whatever one read brought (an event split over reads, several events in
one read) and returns the data of every event it completed, as bytes: the hot path parses no
JSON here, and allocates one bytes object per event (the data), none per comment.
"""

from __future__ import annotations

DONE = b"[DONE]"


class SseParser:
    """Incremental event-stream parser: `feed(bytes) -> [event data]`; `pending` says whether a part is kept."""

    __slots__ = ("_buf", "_cr", "_data", "_has_data")

    def __init__(self) -> None:
        self._buf = bytearray()  # the start of a line not yet ended
        self._data: list[bytes] = []  # the data lines of the event being read
        self._has_data = False
        self._cr = False  # the last read ended with a CR (an LF first in the next is its CRLF's)

    @property
    def pending(self) -> bool:
        """Whether part of an event (an unended line, or data lines before their blank line) is kept."""
        return bool(self._buf) or self._has_data

    def reset(self) -> None:
        """Forget any partial event (a new response on the connection)."""
        self._buf.clear()
        self._data.clear()
        self._has_data = False
        self._cr = False

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[bytes]:
        """The data of each event completed by `chunk` (in order); partial lines and events are kept."""
        buf = self._buf
        if self._cr and chunk[:1] == b"\n":
            chunk = chunk[1:]  # the LF of a CRLF whose CR ended the last read: that line has ended
        self._cr = False
        if b"\r" in chunk:
            # CR and CRLF end lines too: a CR ends its line at once, and an LF right after it is dropped
            self._cr = chunk[-1:] == b"\r"
            chunk = bytes(chunk).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf += chunk
        out: list[bytes] = []
        start = 0
        n = len(buf)
        while start < n:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            if end == start:  # a blank line: dispatch
                if self._has_data:
                    data = self._data
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
                    self._has_data = False
            elif buf[start] == 0x3A:  # ':' a comment
                pass
            elif buf.startswith(b"data:", start):
                value_at = start + 5
                if value_at < end and buf[value_at] == 0x20:
                    value_at += 1
                self._data.append(bytes(buf[value_at:end]))
                self._has_data = True
            elif buf.startswith(b"data", start) and end == start + 4:  # "data" with no colon: an empty data line
                self._data.append(b"")
                self._has_data = True
            start = end + 1
        if start:
            del buf[:start]
        return out
