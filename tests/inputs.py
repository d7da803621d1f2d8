"""Inputs that exercise every branch of grpc._common's conversions, as values and as strategies."""

from helpers import METHOD_NAME as METHOD  # what every timing and probe takes for a method name
from hypothesis import strategies as st

SENTINEL = object()  # returned by overrides so that identity can be compared across implementations


class StrSubclass(str):
    pass


class StrSubclassOwnEncode(str):
    def encode(self, *args):
        return SENTINEL


class BytesSubclass(bytes):
    pass


class BytesSubclassOwnDecode(bytes):
    def decode(self, *args):
        return ("decoded", bytes(self), args)


class DuckEncoder:
    def encode(self, *args):
        return ("duck", args)


class EncodeReturnsInt:
    def encode(self, *args):
        return 42


class EncodeRaises:
    def encode(self, *args):
        raise LookupError(f"cannot encode with {args}")


class SerializerError(Exception):
    pass


def serialize_to_sentinel(message):
    return SENTINEL


def serialize_to_tuple(message):
    return ("serialized", message)


def serialize_raises_exception(message):
    raise SerializerError(f"cannot serialize {type(message).__name__}")


def serialize_raises_keyboard_interrupt(message):
    raise KeyboardInterrupt("stop")


def serialize_raises_system_exit(message):
    raise SystemExit(3)


def serialize_identity(message):
    return message


SERIALIZERS = (
    None,
    len,  # a builtin (bytes would be too, but bytes(10**9) of a generated int takes seconds)
    str,
    serialize_to_sentinel,
    serialize_to_tuple,
    serialize_identity,
    serialize_raises_exception,
    serialize_raises_keyboard_interrupt,
    serialize_raises_system_exit,
    5,  # not callable: a TypeError inside the try, logged like any Exception
)

BIG = 3 * 1024 * 1024
STRINGS = (
    "",
    "a",
    METHOD,
    "h\xe9llo w\xf6rld",
    "\U0001f600 non-BMP \U00010348",
    "nul\x00inside",
    "\ud800",
    "lone \udfff surrogate",
    "x" * BIG,
    "\u20ac" * BIG,
    StrSubclass(METHOD),
    StrSubclass("\ud800"),
    StrSubclassOwnEncode(METHOD),
)
BYTES = (
    b"",
    b"a",
    METHOD.encode(),
    b"\xff",
    b"\xc3",
    b"ok\xffok\xfe\xc3\xa9\xe2\x82",
    b"\xed\xa0\x80",  # an encoded surrogate: invalid UTF-8
    b"nul\x00inside",
    b"y" * BIG,
    b"\xff" * BIG,
    BytesSubclass(b"sub\xffclass"),
    BytesSubclassOwnDecode(b"own decode"),
)
OTHERS = (
    None,
    0,
    1.5,
    bytearray(b"bytearray\xff"),
    memoryview(b"memoryview"),
    DuckEncoder(),
    EncodeReturnsInt(),
    EncodeRaises(),
    object(),
    ["list"],
)
VALUES = STRINGS + BYTES + OTHERS

any_text = st.text(alphabet=st.characters(exclude_categories=()))  # surrogates included
any_bytes = st.binary() | any_text.map(lambda t: t.encode("utf-8", "surrogatepass"))
any_value = st.one_of(
    any_text,
    any_bytes,
    any_text.map(StrSubclass),
    any_text.map(StrSubclassOwnEncode),
    any_bytes.map(BytesSubclass),
    any_bytes.map(BytesSubclassOwnDecode),
    any_bytes.map(bytearray),
    any_bytes.map(memoryview),
    st.none(),
    st.integers(),
    st.sampled_from([DuckEncoder(), EncodeReturnsInt(), EncodeRaises(), object()]),
)
any_serializer = st.sampled_from(SERIALIZERS)
