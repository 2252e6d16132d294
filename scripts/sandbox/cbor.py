"""CBOR answers (KEP-4222), as kube-apiserver 1.32+ with CBORServingAndStorage gives them.

A client that prefers application/cbor in its Accept header gets a GET, a LIST or an error's
Status as one CBOR data item (Content-Type application/cbor), and a watch as a CBOR
Sequence (RFC 8742, application/cbor-seq, which kube-apiserver serves to a watch that asked
for application/cbor too: apiserver/pkg/endpoints/handlers/watch.go): each event a data
item, back to back. The Table and metadata-only forms stay JSON here.

The encoding is what apimachinery's encoder writes (runtime/serializer/cbor/internal/modes/
encode.go): every item prefixed by the self-described CBOR tag 55799 (0xd9d9f7), strings and
map keys as byte strings (String: StringToByteString, FieldName: FieldNameToByteString),
integers in their shortest form, floats in the shortest of half, single and double that
holds the value (ShortestFloat16), definite lengths only. The sandbox holds objects as JSON,
so a Go []byte is already its base64 string and is written as that string, not as a tagged
byte string; the transcoder reads both the same (spec/unit/cbor_spec.lua).

Python's standard library has no CBOR; encoding JSON values is short, so it is written here
rather than adding a package.
"""
import json
import math
import struct

CBOR = "application/cbor"
CBOR_SEQ = "application/cbor-seq"
SELF_DESCRIBED = b"\xd9\xd9\xf7"


def _head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for ai, fmt, limit in ((24, ">B", 1 << 8), (25, ">H", 1 << 16), (26, ">I", 1 << 32),
                           (27, ">Q", 1 << 64)):
        if n < limit:
            return bytes([major << 5 | ai]) + struct.pack(fmt, n)
    raise ValueError("integer out of CBOR's range: %d" % n)


def _float(x):
    for ai, fmt in ((25, ">e"), (26, ">f")):
        try:
            packed = struct.pack(fmt, x)
        except OverflowError:
            continue
        if struct.unpack(fmt, packed)[0] == x:
            return bytes([0xe0 | ai]) + packed
    return b"\xfb" + struct.pack(">d", x)


def _encode(value, out):
    if value is None:
        out.append(b"\xf6")
    elif value is True:
        out.append(b"\xf5")
    elif value is False:
        out.append(b"\xf4")
    elif isinstance(value, int):
        out.append(_head(0, value) if value >= 0 else _head(1, -1 - value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("CBOR answers hold no NaN or infinity, as Go's encoder refuses them")
        out.append(_float(value))
    elif isinstance(value, str):
        data = value.encode("utf-8")
        out.append(_head(2, len(data)))
        out.append(data)
    elif isinstance(value, list):
        out.append(_head(4, len(value)))
        for item in value:
            _encode(item, out)
    else:
        out.append(_head(5, len(value)))
        for key, item in value.items():
            _encode(key, out)
            _encode(item, out)


def encode(value, self_described=True):
    """One CBOR data item of a JSON value; self-described (tag 55799) as a whole answer is."""
    out = [SELF_DESCRIBED] if self_described else []
    _encode(value, out)
    return b"".join(out)


def head(major, n):
    """The header of a CBOR item of major type major (4: array, 5: map) and argument n."""
    return _head(major, n)


def from_json(text):
    """The CBOR of a JSON text (an answer or a watch event as the sandbox writes it)."""
    return encode(json.loads(text))


def _ranges(accept):
    """(media type, q) of each range of an Accept header, in its order."""
    for part in (accept or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        q = 1.0
        for param in fields[1:]:
            name, _, val = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(val)
                except ValueError:
                    q = 0.0
        yield fields[0].lower(), q


def wanted(accept, watch):
    """Whether the Accept header prefers CBOR to JSON: the CBOR range has the higher
    quality, or the same and comes first, as apiserver's negotiation picks the first
    acceptable range of the highest quality."""
    cbor_types = (CBOR, CBOR_SEQ) if watch else (CBOR,)
    best = None
    for media, q in _ranges(accept):
        if q <= 0 or media not in cbor_types + ("application/json", "application/*", "*/*"):
            continue
        if best is None or q > best[1]:
            best = (media, q)
    return best is not None and best[0] in cbor_types
