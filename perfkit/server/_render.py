"""Text-level edits of a config.pbtxt: change only the fields whose values differ.

protobuf's text format printer drops comments and rewrites layout, so printing a candidate
loses what the user wrote around it. Instead the original text is tokenized (comments,
strings, nested messages and lists understood), each field occurrence located by its span,
and only the spans of fields whose values differ are replaced (recursing into messages
present on both sides, so comments inside them survive); new fields are appended at the
end of their message. The caller checks the result re-parses to the wanted config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import message_factory, text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<comment>\#[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<punct>[{}\[\]<>:,;])
      | (?P<word>[^\s{}\[\]<>:,;"'\#]+)""",
    re.VERBOSE,
)
_CLOSE = {"{": "}", "<": ">"}


class RenderError(Exception):
    """The text has a shape this editor does not handle (the caller falls back)."""


@dataclass
class _Tok:
    kind: str
    text: str
    start: int
    end: int


@dataclass
class _Node:
    """One value: a message ({...} body range), a list of nodes, or a scalar."""

    kind: str  # "message" | "list" | "scalar"
    start: int
    end: int
    body_start: int = 0
    body_end: int = 0
    fields: list[_Occ] = field(default_factory=list)
    items: list[_Node] = field(default_factory=list)


@dataclass
class _Occ:
    """One occurrence of a field in a message body: `name[:] value[,;]`."""

    name: str
    start: int
    end: int  # after the value and its separator
    value: _Node


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise RenderError(f"unexpected character {text[pos]!r} at offset {pos}")
        kind = m.lastgroup or ""
        if kind not in ("ws", "comment"):
            toks.append(_Tok(kind, m.group(), m.start(), m.end()))
        pos = m.end()
    return toks


class _Parser:
    def __init__(self, toks: list[_Tok], length: int) -> None:
        self.toks = toks
        self.i = 0
        self.length = length

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise RenderError("unexpected end of text")
        self.i += 1
        return tok

    def body(self, closing: str | None) -> list[_Occ]:
        occs: list[_Occ] = []
        while (tok := self.peek()) is not None and tok.text != closing:
            if tok.kind != "word":
                raise RenderError(f"expected a field name at offset {tok.start}, found {tok.text!r}")
            self.take()
            nxt = self.peek()
            if nxt is not None and nxt.text == ":":
                self.take()
            value = self.value()
            end = value.end
            sep = self.peek()
            if sep is not None and sep.text in (",", ";"):
                end = self.take().end
            occs.append(_Occ(tok.text, tok.start, end, value))
        if closing is not None and self.peek() is None:
            raise RenderError(f"missing {closing!r}")
        return occs

    def value(self) -> _Node:
        tok = self.take()
        if tok.text in _CLOSE:
            fields = self.body(_CLOSE[tok.text])
            close = self.take()
            return _Node("message", tok.start, close.end, tok.end, close.start, fields=fields)
        if tok.text == "[":
            items: list[_Node] = []
            while (nxt := self.peek()) is not None and nxt.text != "]":
                items.append(self.value())
                if (sep := self.peek()) is not None and sep.text == ",":
                    self.take()
            close = self.take()
            return _Node("list", tok.start, close.end, items=items)
        if tok.kind == "string":
            end = tok.end
            while (nxt := self.peek()) is not None and nxt.kind == "string":  # "a" "b" concatenates
                end = self.take().end
            return _Node("scalar", tok.start, end)
        if tok.kind == "word":
            return _Node("scalar", tok.start, tok.end)
        raise RenderError(f"unexpected {tok.text!r} at offset {tok.start}")


@dataclass
class _Edit:
    start: int
    end: int
    text: str


def _indent_at(text: str, pos: int) -> int:
    line_start = text.rfind("\n", 0, pos) + 1
    prefix = text[line_start:pos]
    return len(prefix) if prefix.strip() == "" else len(prefix) - len(prefix.lstrip())


def _render_field(msg: Message, fd: FieldDescriptor, indent: int) -> str:
    """`fd` of msg as text at `indent` (first line without its indent, no final newline)."""
    tmp = type(msg)()
    value = getattr(msg, fd.name)
    if _repeated(fd):
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            for k in value:
                if _is_msg_map(fd):
                    getattr(tmp, fd.name)[k].CopyFrom(value[k])
                else:
                    getattr(tmp, fd.name)[k] = value[k]
        else:
            getattr(tmp, fd.name).extend(value)
    elif fd.message_type is not None:
        getattr(tmp, fd.name).CopyFrom(value)
    else:
        setattr(tmp, fd.name, value)
    out = str(text_format.MessageToString(tmp, indent=indent)).rstrip("\n")
    return out[indent:]


def _repeated(fd: FieldDescriptor) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 5.29; `label` is deprecated there
    if flag is not None:
        return bool(flag)
    return bool(fd.label == FieldDescriptor.LABEL_REPEATED)


def _is_map(fd: FieldDescriptor) -> bool:
    repeated = _repeated(fd)
    return repeated and fd.message_type is not None and bool(fd.message_type.GetOptions().map_entry)


def _is_msg_map(fd: FieldDescriptor) -> bool:
    return fd.message_type.fields_by_name["value"].message_type is not None


def _delete(text: str, occ: _Occ) -> _Edit:
    """Remove an occurrence, and its line when nothing else is left on it."""
    start, end = occ.start, occ.end
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    rest = text[end:line_end].strip()
    if text[line_start:start].strip() == "" and (rest == "" or rest.startswith("#")):
        return _Edit(line_start, min(line_end + 1, len(text)), "")
    return _Edit(start, end, "")


def _elements(occs: list[_Occ], *, lists: bool = False) -> list[_Node] | None:
    """The message elements of a repeated field, in order (from `name {..}` occurrences, and
    from `name [{..}, {..}]` lists when `lists`); None when some element is not a message."""
    out: list[_Node] = []
    for o in occs:
        if o.value.kind == "message":
            out.append(o.value)
        elif lists and o.value.kind == "list" and all(i.kind == "message" for i in o.value.items):
            out.extend(o.value.items)
        else:
            return None
    return out


def _edit_message(text: str, node_fields: list[_Occ], body_end: int, old: Message, new: Message, indent: int,
                  top: bool) -> list[_Edit]:  # fmt: skip
    edits: list[_Edit] = []
    by_name: dict[str, list[_Occ]] = {}
    for occ in node_fields:
        by_name.setdefault(occ.name, []).append(occ)
    descriptor = new.DESCRIPTOR
    for name in by_name:
        if name not in descriptor.fields_by_name:
            raise RenderError(f"field {name!r} is not a field of {descriptor.name}")
    appends: list[str] = []
    for fd in descriptor.fields:
        old_v, new_v = getattr(old, fd.name), getattr(new, fd.name)
        if _same(old, new, fd):
            continue
        occs = by_name.get(fd.name, [])
        present = _present(new, fd)
        if not occs:
            if present:
                appends.append(_render_field(new, fd, indent))
            continue
        if not present:
            edits.extend(_delete(text, o) for o in occs)
            continue
        repeated = _repeated(fd)
        if fd.message_type is None and not repeated and len(occs) == 1 and occs[0].value.kind == "scalar":
            # Only the value changes: `name : value  # comment` keeps its spacing and comment.
            value = _render_field(new, fd, 0).split(":", 1)[1].strip()
            edits.append(_Edit(occs[0].value.start, occs[0].value.end, value))
            continue
        if fd.message_type is not None and not repeated and len(occs) == 1 and occs[0].value.kind == "message":
            v = occs[0].value
            edits.extend(_edit_nested(text, v, old_v, new_v))
            continue
        if repeated and fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            done = _edit_map(text, occs, fd, old_v, new_v, indent)
            if done is not None:
                edits.extend(done)
                continue
        elif repeated and fd.message_type is not None:
            elems = _elements(occs, lists=True)
            if elems is not None and len(elems) == len(old_v) == len(new_v):
                for node, o, n in zip(elems, old_v, new_v, strict=True):
                    if o != n:
                        edits.extend(_edit_nested(text, node, o, n))
                continue
        # Wholesale: the first occurrence becomes the whole new field, the others go.
        col = _indent_at(text, occs[0].start)
        edits.append(_Edit(occs[0].start, occs[0].end, _render_field(new, fd, col)))
        edits.extend(_delete(text, o) for o in occs[1:])
    if appends:
        edits.append(_append(text, body_end, appends, indent, top))
    return edits


def _edit_nested(text: str, node: _Node, old: Message, new: Message) -> list[_Edit]:
    inner = node.fields
    indent = _indent_at(text, inner[0].start) if inner else _indent_at(text, node.start) + 2
    if not inner and new.ListFields():
        # An empty `{ }`: write the body on its own lines.
        col = _indent_at(text, node.start)
        body = str(text_format.MessageToString(new, indent=col + 2)).rstrip("\n")
        return [_Edit(node.body_start, node.body_end, "\n" + body + "\n" + " " * col)]
    return _edit_message(text, inner, node.body_end, old, new, indent, top=False)


def _edit_map(
    text: str, occs: list[_Occ], fd: FieldDescriptor, old_map: Any, new_map: Any, indent: int
) -> list[_Edit] | None:
    elems = _elements(occs)
    if elems is None:
        return None
    entry_type = fd.message_type
    edits: list[_Edit] = []
    seen: set[object] = set()

    entry_cls = message_factory.GetMessageClass(entry_type)
    for occ, node in zip(occs, elems, strict=True):
        entry = entry_cls()
        text_format.Parse(text[node.body_start : node.body_end], entry)
        key = entry.key
        if key in seen:
            return None  # a repeated key: the last one wins in protobuf; too subtle to edit
        seen.add(key)
        if key not in new_map:
            edits.append(_delete(text, occ))
            continue
        want = entry_cls()
        want.key = key
        new_value = new_map[key]
        if _is_msg_map(fd):
            want.value.CopyFrom(new_value)
        else:
            want.value = new_value
        if want != entry:
            edits.extend(_edit_nested(text, node, entry, want))
    added = [k for k in new_map if k not in seen]
    if added:
        parent_cls = message_factory.GetMessageClass(fd.containing_type)
        tmp = parent_cls()
        for k in added:
            if _is_msg_map(fd):
                getattr(tmp, fd.name)[k].CopyFrom(new_map[k])
            else:
                getattr(tmp, fd.name)[k] = new_map[k]
        col = _indent_at(text, occs[0].start)
        rendered = _render_field(tmp, fd, col)
        kept = [o for o in occs if _kept(o, edits)]
        if kept:  # after the last entry that stays
            edits.append(_Edit(kept[-1].end, kept[-1].end, "\n" + " " * col + rendered))
        else:  # every entry goes: the new ones take the first one's line
            line_start = text.rfind("\n", 0, occs[0].start) + 1
            edits.append(_Edit(line_start, line_start, " " * col + rendered + "\n"))
    return edits


def _kept(occ: _Occ, edits: list[_Edit]) -> bool:
    """Whether no deletion removes this occurrence."""
    return not any(e.text == "" and e.start <= occ.start and occ.end <= e.end for e in edits)


def _append(text: str, body_end: int, parts: list[str], indent: int, top: bool) -> _Edit:
    block = "\n".join(" " * indent + p for p in parts)
    if top:
        lead = "" if text == "" or text.endswith("\n") else "\n"
        return _Edit(len(text), len(text), lead + block + "\n")
    # Inside a message: after the last non-blank character before the closing brace.
    pos = body_end
    while pos > 0 and text[pos - 1] in " \t":
        pos -= 1
    if pos > 0 and text[pos - 1] == "\n":
        return _Edit(pos, pos, block + "\n")
    return _Edit(pos, pos, "\n" + block + "\n" + " " * max(indent - 2, 0))


def _present(msg: Message, fd: FieldDescriptor) -> bool:
    if _repeated(fd):
        return len(getattr(msg, fd.name)) > 0
    if fd.message_type is not None or fd.has_presence:
        return msg.HasField(fd.name)
    return bool(getattr(msg, fd.name) != fd.default_value)


def _same(a: Message, b: Message, fd: FieldDescriptor) -> bool:
    if _present(a, fd) != _present(b, fd):
        return False
    va, vb = getattr(a, fd.name), getattr(b, fd.name)
    if _repeated(fd) and fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        return dict(va.items()) == dict(vb.items())
    if _repeated(fd):
        return list(va) == list(vb)
    return bool(va == vb)


def render_edits(original_text: str, old: Message, new: Message) -> str:
    """original_text (which parses to `old`) edited into `new`, touching only what differs.
    Raises RenderError when the text has a shape this editor does not handle."""
    toks = _tokenize(original_text)
    parser = _Parser(toks, len(original_text))
    top = parser.body(None)
    edits = _edit_message(original_text, top, len(original_text), old, new, 0, top=True)
    out = original_text
    last_start = len(out) + 1
    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        if e.end > last_start:
            raise RenderError("overlapping edits")
        out = out[: e.start] + e.text + out[e.end :]
        last_start = e.start
    return out
