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

    __slots__ = ("_buf", "_cr")

    def __init__(self) -> None:
        self._buf = bytearray()  # the start of the event not yet ended by its blank line
        self._cr = False  # the last read ended with a CR (an LF first in the next is its CRLF's)

    @property
    def pending(self) -> bool:
        """Whether part of an event (lines before their blank line) is kept."""
        return bool(self._buf.strip(b"\n"))

    def reset(self) -> None:
        """Forget any partial event (a new response on the connection)."""
        self._buf.clear()
        self._cr = False

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[bytes]:
        """The data of each event completed by `chunk` (in order); partial lines and events are kept."""
        if self._cr and chunk[:1] == b"\n":
            chunk = chunk[1:]  # the LF of a CRLF whose CR ended the last read: that line has ended
        self._cr = False
        if b"\r" in chunk:
            # CR and CRLF end lines too: a CR ends its line at once, and an LF right after it is dropped
            self._cr = chunk[-1:] == b"\r"
            chunk = bytes(chunk).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf
        buf += chunk
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            return []
        block = bytes(buf[:cut])
        del buf[: cut + 2]
        out: list[bytes] = []
        for part in block.split(b"\n\n"):
            # the common event, one `data: ` line, without a walk over its lines
            if part.startswith(b"data: ") and b"\n" not in part:
                out.append(part[6:])
            elif part:
                data = _event_data(part)
                if data is not None:
                    out.append(data)
        return out


def _event_data(event: bytes) -> bytes | None:
    """The data of one event's lines (None when it has no data line: a comment, another field only)."""
    data: list[bytes] = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            data.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line == b"data":
            data.append(b"")
    if not data:
        return None
    return data[0] if len(data) == 1 else b"\n".join(data)
