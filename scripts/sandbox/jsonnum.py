"""JSON numbers as kube-apiserver reads and writes them.

kube-apiserver decodes a request body with sigs.k8s.io/json
(UnmarshalCaseSensitivePreserveInts, vendor/sigs.k8s.io/json/README.md): an integer that
fits an int64 becomes an int64, every other number a float64. A custom resource is kept
so (unstructured), and written back with Go's encoding/json (floatEncoder in
encoding/json/encode.go): the shortest digits that read back to the float64, in plain
notation unless it is below 1e-6 or from 1e21 on, where the exponent has no leading zero.
So 12345678901234567890 comes back as 12345678901234567000, 1.0 as 1, 1e3 as 1000,
0.00001 as 0.00001, 1e-07 as 1e-7, while 123456789.123 and 1e+21 stay as they are.

The sandbox holds numbers as the Python values that json.dumps writes as Go would: ints
for int64s and for floats with an integer value below 1e21 (with Go's digits), floats for
the rest; dumps() then rewrites the one notation where Python and Go differ, the
exponents -5 to -9.
"""
import json
import math
import re
from decimal import Decimal

INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1


def _float64(f):
    """The value of a float64 f whose JSON text json.dumps writes as Go's."""
    if math.isinf(f) or math.isnan(f):
        raise ValueError("number out of range")  # Go: cannot unmarshal number ... into float64
    if f.is_integer() and abs(f) < 1e21:
        return int(Decimal(repr(f)))  # repr's digits are Go's: the shortest that read back
    return f


def parse_int(text):
    n = int(text)
    return n if INT64_MIN <= n <= INT64_MAX else _float64(float(text))


def parse_float(text):
    return _float64(float(text))


def loads(text):
    """JSON text as kube-apiserver decodes it (raises ValueError)."""
    return json.loads(text, parse_int=parse_int, parse_float=parse_float)


def value(v):
    """A number read from YAML (sigs.k8s.io/yaml turns it into JSON first) as loads reads it."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    return parse_int(str(v)) if isinstance(v, int) else _float64(v)


_SMALL = re.compile(r"\de-0[5-9]")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|(-?[0-9](?:\.[0-9]+)?e-0([5-9]))')


def _go_small(m):
    if m.group(1) is None:
        return m.group(0)
    text, exp = m.group(1), int(m.group(2))
    if exp >= 7:  # below 1e-6
        return text.replace("e-0", "e-")
    sign = "-" if text[0] == "-" else ""
    digits = text.lstrip("-").split("e")[0].replace(".", "")
    return sign + "0." + "0" * (exp - 1) + digits


def go_floats(text):
    """JSON text of json.dumps with its floats as Go writes them: Python writes 1e-05 and
    1e-07 where Go writes 0.00001 and 1e-7 (both are alike from exponent -10 on)."""
    return _TOKEN.sub(_go_small, text) if _SMALL.search(text) else text
