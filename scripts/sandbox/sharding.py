"""shardSelector on LIST and WATCH: server-side sharding, KEP-5866 (kube-apiserver 1.36,
alpha, feature gate ShardedListAndWatch, off by default).

As the KEP and the 1.36 API reference describe it: the selector is one shardRange() call
or several joined by "||", each naming a field path (object.metadata.uid or
object.metadata.namespace) and a hexadecimal range [start, end) of the 64-bit FNV-1a hash
of the field's value (its string bytes); end may be 0x10000000000000000 (2^64) to close
the space. A LIST that applied one echoes it in metadata.shardInfo.selector. Without the
gate the parameter is an unknown query parameter, which kube-apiserver ignores.
docs/sandbox.md lists what is assumed where the KEP is silent.
"""
import re

from .status import bad_request

FNV64_OFFSET = 0xcbf29ce484222325
FNV64_PRIME = 0x100000001b3
SPACE = 1 << 64

FIELDS = {
    "object.metadata.uid": lambda doc: doc.meta.get("uid") or "",
    "object.metadata.namespace": lambda doc: doc.meta.get("namespace") or "",
}

_RANGE = re.compile(r"^\s*shardRange\(\s*([A-Za-z.]+)\s*,\s*'0[xX]([0-9a-fA-F]+)'\s*,"
                    r"\s*'0[xX]([0-9a-fA-F]+)'\s*\)\s*$")


def fnv1a64(text):
    h = FNV64_OFFSET
    for byte in text.encode("utf-8"):
        h = ((h ^ byte) * FNV64_PRIME) % SPACE
    return h


def _invalid(text, why):
    return bad_request('invalid shardSelector "%s": %s' % (text, why))


class ShardSelector:
    """A parsed shardSelector; empty when the request had none or the gate is off."""

    def __init__(self, text, enabled):
        self.text = (text or "") if enabled else ""
        self.ranges = []
        if self.text:
            for term in self.text.split("||"):
                self.ranges.append(self._term(term))

    def _term(self, term):
        m = _RANGE.match(term)
        if not m:
            raise _invalid(self.text, "want shardRange(object.metadata.uid, '0xSTART', '0xEND'), "
                                      "joined by ||")
        field, start, end = m.group(1), int(m.group(2), 16), int(m.group(3), 16)
        if field not in FIELDS:
            raise _invalid(self.text, "field %s is not supported: only %s"
                           % (field, ", ".join(sorted(FIELDS))))
        if not start < end <= SPACE:
            raise _invalid(self.text, "a range needs start < end <= 0x10000000000000000")
        return FIELDS[field], start, end

    def empty(self):
        return not self.ranges

    def matches(self, doc):
        if not self.ranges:
            return True
        return any(start <= fnv1a64(get(doc)) < end for get, start, end in self.ranges)

    def list_meta(self):
        """The shardInfo a LIST's metadata echoes, or None."""
        return {"selector": self.text} if self.ranges else None
