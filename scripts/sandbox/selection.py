"""Label and field selectors with the grammar and matching rules of k8s.io/apimachinery."""
import re

from .status import bad_request

NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
PREFIX_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SPECIAL = "=!(),<> \t"


def label_key_problem(key):
    """Why key is not a valid label key, or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not PREFIX_RE.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not NAME_RE.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                "start and end with an alphanumeric character, at most 63 characters")
    return None


def label_value_problem(value):
    """Why value is not a valid label value, or None."""
    if value == "" or (len(value) <= 63 and NAME_RE.match(value)):
        return None
    return ("a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character, "
            "at most 63 characters")


def _tokens(text):
    i, out = 0, []
    while i < len(text):
        c = text[i]
        if c in " \t":
            i += 1
        elif text.startswith("==", i) or text.startswith("!=", i):
            out.append(text[i:i + 2])
            i += 2
        elif c in SPECIAL:
            out.append(c)
            i += 1
        else:
            j = i
            while j < len(text) and text[j] not in SPECIAL:
                j += 1
            out.append(text[i:j])
            i = j
    return out


class _Parser:
    def __init__(self, text):
        self.toks = _tokens(text)
        self.pos = 0

    def peek(self):
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self):
        tok = self.peek()
        self.pos += 1
        return tok

    def fail(self, what):
        raise bad_request("unable to parse requirement: found '%s', expected: %s"
                          % (self.peek() or "", what))

    def identifier(self):
        tok = self.peek()
        if tok is None or (len(tok) <= 2 and tok in SPECIAL + "==!="):
            self.fail("identifier")
        return self.take()

    def value(self):
        tok = self.peek()
        if tok is None or tok in (",", ")"):
            return ""
        if tok in SPECIAL or tok in ("==", "!="):
            self.fail("identifier")
        return self.take()

    def values(self):
        if self.take() != "(":
            self.pos -= 1
            self.fail("'('")
        vals = []
        while True:
            vals.append(self.value())
            tok = self.take()
            if tok == ")":
                return vals
            if tok != ",":
                self.pos -= 1
                self.fail("',' or ')'")

    def requirement(self):
        if self.peek() == "!":
            self.take()
            return (self.identifier(), "!", None)
        key = self.identifier()
        op = self.peek()
        if op is None or op == ",":
            return (key, "exists", None)
        self.take()
        if op in ("=", "==", "!="):
            return (key, "!=" if op == "!=" else "=", [self.value()])
        if op in ("in", "notin"):
            return (key, op, self.values())
        if op in ("<", ">"):
            num = self.value()
            if not re.match(r"^-?[0-9]+$", num):
                raise bad_request("unable to parse requirement: for 'Gt', 'Lt' operators, "
                                  "the value must be an integer")
            return (key, op, [num])
        self.pos -= 1
        self.fail("'=', '!=', '==', 'in', 'notin'")
        return None


def _check(req):
    key, _, vals = req
    problem = label_key_problem(key)
    if problem:
        raise bad_request('unable to parse requirement: key: Invalid value: "%s": %s'
                          % (key, problem))
    for i, v in enumerate(vals or []):
        problem = None if req[1] in ("<", ">") else label_value_problem(v)
        if problem:
            raise bad_request('unable to parse requirement: values[%d][%s]: Invalid value: '
                              '"%s": %s' % (i, key, v, problem))


class LabelSelector:
    """A parsed labelSelector; matches(labels) follows labels.Requirement semantics."""

    def __init__(self, text):
        self.text = text or ""
        self.reqs = []
        parser = _Parser(self.text)
        while parser.peek() is not None:
            req = parser.requirement()
            _check(req)
            self.reqs.append(req)
            tok = parser.take()
            if tok not in (None, ","):
                parser.pos -= 1
                parser.fail("','")

    def empty(self):
        return not self.reqs

    def matches(self, labels):
        return all(_matches(req, labels or {}) for req in self.reqs)


def _matches(req, labels):
    key, op, vals = req
    has = key in labels
    if op == "exists":
        return has
    if op == "!":
        return not has
    if op == "=" or op == "in":
        return has and labels[key] in vals
    if op == "!=" or op == "notin":
        return not has or labels[key] not in vals
    if not has or not re.match(r"^-?[0-9]+$", labels[key]):
        return False
    if op == ">":
        return int(labels[key]) > int(vals[0])
    return int(labels[key]) < int(vals[0])


def _split_unescaped(text, seps):
    """Splits at any of seps not preceded by a backslash; returns the pieces unescaped."""
    parts, cur, i = [], "", 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur += text[i:i + 2]
            i += 2
            continue
        if c in seps:
            parts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    parts.append(cur)
    return parts


def _unescape(text):
    return re.sub(r"\\(.)", r"\1", text)


class SelectableFields(dict):
    """Field path -> getter for the fields a kind's field selectors may name.

    A kind with its own field label conversion function (pods, events, CRDs...) refuses
    any other field as "field label not supported: F"; the others fall back to
    apimachinery's DefaultMetaV1FieldSelectorConversion, which words it differently.
    """

    def __init__(self, own_conversion):
        super().__init__()
        self.own_conversion = own_conversion

    def refusal(self, field):
        if self.own_conversion:
            return "field label not supported: " + field
        return '"%s" is not a known field selector: only "metadata.name", "metadata.namespace"' % field


class FieldSelector:
    """A parsed fieldSelector over the fields a resource type supports."""

    def __init__(self, text, fields):
        self.text = text or ""
        self.reqs = []
        for term in (_split_unescaped(self.text, ",") if self.text else []):
            self.reqs.append(self._term(term.strip(), fields))

    @staticmethod
    def _term(term, fields):
        m = re.match(r"^((?:\\.|[^!=\\])*)(!=|==|=)(.*)$", term)
        if not m:
            raise bad_request("invalid selector: '%s'; can't understand '%s'" % (term, term))
        field, op, value = m.group(1).strip(), m.group(2), _unescape(m.group(3))
        if field not in fields:
            raise bad_request(fields.refusal(field))
        return (fields[field], op == "!=", value)

    def empty(self):
        return not self.reqs

    def matches(self, obj):
        for getter, negate, value in self.reqs:
            if (getter(obj) == value) == negate:
                return False
        return True
