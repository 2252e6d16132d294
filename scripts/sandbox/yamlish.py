"""The YAML that apply bodies are written in, with the standard library only.

kube-apiserver reads an apply patch with sigs.k8s.io/yaml (YAML 1.2 to JSON). This reads
JSON, and one YAML document of block mappings and sequences (compact `- key: v` items
too), flow collections, plain, quoted and block (`|`, `>`) scalars and comments. Anchors,
tags and several documents are refused with ValueError, as anything it cannot read.
"""
import json
import re

from . import jsonnum

INT_RE = re.compile(r"^[-+]?(0|[1-9][0-9]*)$")
FLOAT_RE = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


def loads(text):
    try:
        return jsonnum.loads(text)
    except ValueError:
        pass
    lines = _Lines(text)
    if lines.at_end():
        return None
    value = _block(lines, lines.indent())
    if not lines.at_end():
        raise ValueError("line %d: unexpected %r" % (lines.number(), lines.text()))
    return value


class _Lines:
    """The document's lines as (indent, text without comment), blank ones skipped."""

    def __init__(self, text):
        self.raw = text.split("\n")
        self.items = []
        for n, raw in enumerate(self.raw):
            stripped = _uncomment(raw).rstrip()
            if stripped.strip() in ("---", "...") and not self.items:
                continue
            if stripped.strip() == "---":
                raise ValueError("line %d: only one YAML document is read" % (n + 1))
            if stripped.strip():
                self.items.append((len(stripped) - len(stripped.lstrip(" ")), stripped.strip(),
                                   n))
        self.pos = 0

    def at_end(self):
        return self.pos >= len(self.items)

    def indent(self):
        return self.items[self.pos][0]

    def text(self):
        return self.items[self.pos][1]

    def number(self):
        return self.items[self.pos][2] + 1

    def replace(self, indent, text):
        self.items[self.pos] = (indent, text, self.items[self.pos][2])


def _uncomment(line):
    quote = None
    for n, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'" and (n == 0 or line[n - 1] in " :[{,-"):
            quote = ch
        elif ch == "#" and (n == 0 or line[n - 1] in " \t"):
            return line[:n]
    return line


def _is_item(text):
    return text == "-" or text.startswith("- ")


def _block(lines, indent):
    if _is_item(lines.text()):
        return _sequence(lines, indent)
    return _mapping(lines, indent)


def _sequence(lines, indent):
    out = []
    while not lines.at_end() and lines.indent() == indent and _is_item(lines.text()):
        text = lines.text()
        rest = text[1:].lstrip(" ")
        if not rest:
            lines.pos += 1
            out.append(_nested(lines, indent, True))
            continue
        if _split_key(rest) is not None or _is_item(rest):
            lines.replace(indent + len(text) - len(rest), rest)
            out.append(_block(lines, lines.indent()))
        else:
            lines.pos += 1
            out.append(_scalar(rest, lines))
    return out


def _nested(lines, indent, in_sequence):
    """The block value under a line that ended with `:` or `-`, or null."""
    if lines.at_end():
        return None
    if lines.indent() > indent:
        return _block(lines, lines.indent())
    if not in_sequence and lines.indent() == indent and _is_item(lines.text()):
        return _sequence(lines, indent)
    return None


def _split_key(text):
    """(key, rest) of a `key: value` line, or None."""
    if text[0] in "\"'":
        end = text.find(text[0], 1)
        if end > 0 and text[end + 1:end + 2] == ":" and text[end + 2:end + 3] in ("", " "):
            key = json.loads(text[:end + 1]) if text[0] == '"' else text[1:end]
            return key, text[end + 2:].strip()
        return None
    if text[0] in "[{":
        return None
    match = re.match(r"^([^:]+?|[^ ][^ ]*?):( |$)", text)
    if not match or text.startswith("- "):
        return None
    return match.group(1).strip(), text[match.end():].strip()


def _mapping(lines, indent):
    out = {}
    while not lines.at_end() and lines.indent() == indent and not _is_item(lines.text()):
        split = _split_key(lines.text())
        if split is None:
            raise ValueError("line %d: expected `key: value`, found %r"
                             % (lines.number(), lines.text()))
        key, rest = split
        if key in out:
            raise ValueError('line %d: mapping key "%s" already defined' % (lines.number(), key))
        number = lines.items[lines.pos][2]
        lines.pos += 1
        if not rest:
            out[key] = _nested(lines, indent, False)
        elif rest[0] in "|>":
            out[key] = _block_scalar(lines, indent, rest, number)
        else:
            out[key] = _scalar(rest, lines)
    return out


def _block_scalar(lines, indent, header, number):
    body = []
    while not lines.at_end() and lines.indent() > indent:
        lines.pos += 1
    last = lines.items[lines.pos][2] if not lines.at_end() else len(lines.raw)
    for raw in lines.raw[number + 1:last]:
        body.append(raw)
    while body and not body[-1].strip():
        body.pop()
    width = min((len(r) - len(r.lstrip(" ")) for r in body if r.strip()), default=0)
    text_lines = [r[width:] for r in body]
    if header[0] == "|":
        text = "\n".join(text_lines)
    else:
        text = " ".join(t for t in text_lines if t) if text_lines else ""
    if "-" in header:
        return text
    return text + "\n" if text_lines else ""


def _scalar(text, lines=None):
    if text[0] in "[{":
        value, end = _flow(text, 0)
        if text[end:].strip():
            raise ValueError("unexpected %r after a flow collection" % text[end:])
        return value
    if text[0] in "&*!":
        raise ValueError("anchors, aliases and tags are not read: %r" % text)
    return _plain(text)


def _plain(text):
    if text[0] == '"':
        return json.loads(text)
    if text[0] == "'":
        if len(text) < 2 or text[-1] != "'":
            raise ValueError("unterminated string %r" % text)
        return text[1:-1].replace("''", "'")
    if text in ("null", "Null", "NULL", "~"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if INT_RE.match(text):
        return jsonnum.value(int(text))
    if FLOAT_RE.match(text) and any(c.isdigit() for c in text):
        return jsonnum.value(float(text))
    return text


def _flow(text, pos):
    """(value, end) of the flow collection or scalar at text[pos]."""
    while pos < len(text) and text[pos] == " ":
        pos += 1
    opener = text[pos]
    if opener not in "[{":
        return _flow_scalar(text, pos)
    closer = "]" if opener == "[" else "}"
    out = [] if opener == "[" else {}
    pos += 1
    while True:
        while pos < len(text) and text[pos] in " ,":
            pos += 1
        if pos >= len(text):
            raise ValueError("unterminated flow collection %r" % text)
        if text[pos] == closer:
            return out, pos + 1
        if opener == "[":
            value, pos = _flow(text, pos)
            out.append(value)
            continue
        key, pos = _flow_scalar(text, pos, key=True)
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if text[pos:pos + 1] != ":":
            raise ValueError("expected ':' in %r" % text)
        value, pos = _flow(text, pos + 1)
        out[str(key)] = value


def _flow_scalar(text, pos, key=False):
    if text[pos] in "\"'":
        end = pos + 1
        while end < len(text) and (text[end] != text[pos] or text[end - 1] == "\\"):
            end += 1
        return _plain(text[pos:end + 1]), end + 1
    stops = ",]}:" if key else ",]}"
    end = pos
    while end < len(text) and text[end] not in stops:
        if text[end] == ":" and not key and text[end + 1:end + 2] in (" ", ""):
            break
        end += 1
    return _plain(text[pos:end].strip()), end
