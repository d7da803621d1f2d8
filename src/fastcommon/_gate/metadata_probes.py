"""The gate's probes of grpc.aio's Metadata: scenarios that do to a copy of its class (grpc's or fastcommon's methods)
what users, interceptors and grpc do; compared: results, their types, _metadata, exceptions, their texts and causes."""

import copy
import sys
from collections import OrderedDict, namedtuple
from collections.abc import Callable
from typing import Any

PAIRS = (("a", "1"), ("b", b"2"), ("a", "3"))


def state(metadata: Any) -> Any:
    """What a Metadata instance holds, read from its attributes alone: no method of its class is called."""
    attributes = vars(metadata)
    held = attributes.get("_metadata")
    if not isinstance(held, dict):
        return sorted(attributes), type(held), repr(held)
    contents = [(key, type(each), list(each) if isinstance(each, list) else each) for key, each in held.items()]
    return sorted(attributes), type(held), contents


def seen(value: Any) -> Any:
    """What a scenario gave, as seen: a Metadata as its state, a value as type and value, anything else as its type."""
    if hasattr(value, "_metadata") and not isinstance(value, type):
        return "a Metadata", type(value).__name__, state(value)
    if isinstance(value, (list, tuple)):
        return type(value), [seen(item) for item in value]
    if value is None or isinstance(value, (str, bytes, int, float, type)):
        return type(value), value
    return (type(value),)


def outcome(scenario: Callable[[Any], Any], cls: Any) -> Any:
    """Everything observable about running ``scenario`` on ``cls``: what it gave, or what it raised."""
    try:
        return "returned", seen(scenario(cls))
    except Exception as exc:
        return "raised", type(exc), str(exc), type(exc.__cause__), exc.__suppress_context__


def steps(iterator: Any, limit: int = 12) -> list[Any]:
    """Each next() of an iterator until it ends, and one more after that: items, the end, errors."""
    taken: list[tuple[Any, ...]] = []
    for _ in range(limit):
        try:
            taken.append(("item", seen(next(iterator))))
        except StopIteration:
            taken.append(("end",))
            if taken[-2:] == [("end",), ("end",)]:
                break
        except Exception as exc:
            taken.append(("raised", type(exc), str(exc)))
    return taken


def _after(action: Callable[[Any], Any], pairs: Any = PAIRS) -> Callable[[Any], Any]:
    """The scenario: the instance made of ``pairs``, after ``action`` was done to it; the action's result seen too."""
    return lambda cls: [action(metadata := cls(*pairs)), metadata]


def _iterated(cls: Any, change: Callable[[Any], Any], before_first: bool = False) -> Any:
    metadata = cls(*PAIRS)
    iterator = iter(metadata)
    first = [] if before_first else [seen(next(iterator))]
    change(metadata)
    return first + steps(iterator)


def _added_to_after_its_end(cls: Any) -> Any:
    metadata = cls(("a", "1"))
    iterator = iter(metadata)
    ended = steps(iterator, 3)
    metadata.add("a", "2")
    return ended, steps(iterator, 2)


def _reentered(cls: Any) -> Any:
    """Values whose iteration asks the very iterator for its next item: a generator refuses that."""
    metadata = cls(*PAIRS)
    iterator = iter(metadata)
    reentrant = type("Reentrant", (), {"__iter__": lambda self: self, "__next__": lambda self: next(iterator)})
    metadata.set_all("b", reentrant())
    return steps(iterator)


def _holding(held: Any) -> Callable[[Any], Any]:
    return lambda metadata: setattr(metadata, "_metadata", held)


def _adding_upper(add: Any) -> Callable[[Any, Any, Any], None]:
    """An add that adds through ``add``, a str key in upper case."""
    return lambda self, key, value: add(self, key.upper() if isinstance(key, str) else key, value)


def _subclass_adding_upper(cls: Any) -> Any:
    return type("Upper", (cls,), {"add": _adding_upper(cls.add)})


def made() -> tuple[Any, Any, Any]:
    """The probes' classes, made per judgement (none at import): grpc core's Entry, a hashing key, a pair's own iter."""

    class Hashing(str):
        """A key whose hash runs ``action`` until None; never raising (in setdefault, Debian's 3.11.2-dbg aborts)."""

        action: Callable[[], Any] | None

        def __new__(cls, text: str, action: Callable[[], Any]) -> "Hashing":
            key = super().__new__(cls, text)
            key.action = action
            return key

        def __hash__(self) -> int:
            if self.action is not None:
                self.action()
            return str.__hash__(self)

        __eq__ = str.__eq__  # kept: a class that defines __hash__ alone would get the default __eq__

    own_iteration = type("OwnIteration", (tuple,), {"__iter__": lambda self: reversed(tuple(tuple.__iter__(self)))})
    return namedtuple("Entry", ("key", "value")), Hashing, own_iteration  # unpacking an OwnIteration runs Python code


def _with_hashing(hashing: Any, make: Callable[[Any], Any], action: Callable[[], Any]) -> Any:
    """make(a key whose hash does ``action``), the key's action gone after."""
    key = hashing("a", action)
    try:
        return make(key)
    finally:
        key.action = None


def _hostile_init(cls: Any, hashing: Any, method: str, *args: Any, maker: str = "") -> Any:
    """cls(first, later) or cls.maker((first, later)); the first key's hash (as add does) calls later.method(*args)."""
    later = ["k", "v"]
    make = getattr(cls, maker) if maker else lambda pairs: cls(*pairs)
    return _with_hashing(hashing, lambda key: make(((key, "x"), later)), lambda: getattr(later, method)(*args))


def _again_hashing(cls: Any, hashing: Any, action: Callable[[Any], Any]) -> Any:
    """An instance's __init__ called again, a key's hash doing ``action`` to the instance on the way."""
    metadata = cls(*PAIRS)
    _with_hashing(hashing, lambda key: metadata.__init__((key, "1"), ("b", "2")), lambda: action(metadata))
    return metadata


def _add_rebound_midway(cls: Any, hashing: Any) -> Any:
    """A key's hash that rebinds the class's add: grpc's __init__ looks add up again for the next pair."""
    own_add, shouting = cls.add, _adding_upper(cls.add)
    try:
        return _with_hashing(hashing, lambda key: cls((key, "1"), ("b", "2")), lambda: setattr(cls, "add", shouting))
    finally:
        cls.add = own_add


def _own_add(cls: Any) -> Any:
    metadata = cls()
    metadata.add = lambda key, value: metadata._metadata.setdefault("own", []).append((key, value))
    metadata.__init__(("a", "1"), ("b", "2"))
    return metadata


def _pickled(cls: Any) -> Any:
    reduced = cls(*PAIRS).__reduce_ex__(2)
    return reduced[1][0].__name__, [seen(part) for part in reduced[2:]]


def scenarios(Entry: Any, Hashing: Any, OwnIteration: Any) -> list[tuple[str, Callable[[Any], Any]]]:
    """Each scenario, by its label, passing the classes made() made."""
    return [
        # Making one: grpc's own way (from_tuple, _create), and users' (Metadata(*pairs)).
        ("Metadata()", lambda cls: cls()),
        ("Metadata(*pairs)", lambda cls: cls(*PAIRS)),
        ("Metadata(*namedtuple entries)", lambda cls: cls(*(Entry(*pair) for pair in PAIRS))),
        ("Metadata(*lists)", lambda cls: cls(["a", "1"], ["b", "2"])),
        ("Metadata(('k',))", lambda cls: cls(("k",))),
        ("Metadata(('k', 'v', 'x'))", lambda cls: cls(("k", "v", "x"))),
        ("Metadata(5)", lambda cls: cls(5)),
        ("Metadata(([], 'v'))", lambda cls: cls(([], "v"))),
        ("Metadata((1, 'v'))", lambda cls: cls((1, "v"), ("a", "b"))),
        ("Metadata('kv')", lambda cls: cls("kv")),
        ("a subclass's own add", lambda cls: _subclass_adding_upper(cls)(*PAIRS)),
        ("Metadata(pairs, a short pair last)", lambda cls: cls(*PAIRS, ("k",))),
        ("Metadata(pairs, a long list last)", lambda cls: cls(*PAIRS, ["k", "v", "x"])),
        ("Metadata(a pair iterating its own way)", lambda cls: cls(OwnIteration(("k", "v")))),
        ("Metadata(a list subclass pair)", lambda cls: cls(type("Pair", (list,), {})(["k", "v"]))),
        ("a key's hash empties a later pair", lambda cls: _hostile_init(cls, Hashing, "clear")),
        ("a key's hash shortens a later pair", lambda cls: _hostile_init(cls, Hashing, "__delitem__", slice(1, None))),
        ("a key's hash lengthens a later pair", lambda cls: _hostile_init(cls, Hashing, "append", "x")),
        ("a key's hash replaces a later pair's key", lambda cls: _hostile_init(cls, Hashing, "insert", 0, "z")),
        ("a key's hash replaces _metadata", lambda cls: _again_hashing(cls, Hashing, _holding(OrderedDict()))),
        ("a key's hash deletes _metadata",
         lambda cls: _again_hashing(cls, Hashing, lambda m: vars(m).pop("_metadata", None))),
        ("a key's hash rebinds add", lambda cls: _add_rebound_midway(cls, Hashing)),
        ("an instance's own add", _own_add),
        ("from_tuple, a key's hash empties a later pair",
         lambda cls: _hostile_init(cls, Hashing, "clear", maker="from_tuple")),
        ("from_tuple(())", lambda cls: cls.from_tuple(())),
        ("from_tuple(pairs)", lambda cls: cls.from_tuple(PAIRS)),
        ("from_tuple(entries)", lambda cls: cls.from_tuple(tuple(Entry(*pair) for pair in PAIRS))),
        ("from_tuple(a list)", lambda cls: cls.from_tuple(list(PAIRS))),
        ("from_tuple(an iterator)", lambda cls: cls.from_tuple(iter(PAIRS))),
        ("from_tuple(None)", lambda cls: cls.from_tuple(None)),
        ("from_tuple('ab')", lambda cls: cls.from_tuple("ab")),
        ("from_tuple(5)", lambda cls: cls.from_tuple(5)),
        ("from_tuple(a Metadata)", lambda cls: cls.from_tuple(cls(*PAIRS))),
        ("a subclass's from_tuple", lambda cls: _subclass_adding_upper(cls).from_tuple(PAIRS)),
        ("_create(None)", lambda cls: cls._create(None)),
        ("_create(itself)", lambda cls: [(metadata := cls(*PAIRS)), cls._create(metadata) is metadata]),
        ("_create(pairs)", lambda cls: cls._create(PAIRS)),
        ("_create(())", lambda cls: cls._create(())),
        ("_create(a list)", lambda cls: cls._create(list(PAIRS))),
        ("_create(5)", lambda cls: cls._create(5)),
        ("a subclass's _create(None)", lambda cls: _subclass_adding_upper(cls)._create(None)),
        # Changing one.
        ("add", _after(lambda m: [m.add("a", "x"), m.add("new", b"y"), m.add(1, "z")])),
        ("add, unhashable", _after(lambda m: m.add([], "v"))),
        ("add to values not a list", _after(lambda m: [m.set_all("t", ("x",)), m.add("t", "y")], ())),
        ("add without _metadata", _after(lambda m: [vars(m).pop("_metadata"), m.add("a", "v")], ())),
        ("add to a plain dict", _after(lambda m: [_holding({"a": ["1"]})(m), m.add("a", "v")], ())),
        ("setitem", _after(lambda m: [m.__setitem__("new", "v"), m.__setitem__("a", "v2")])),
        ("setitem, keys not str", _after(lambda m: [m.__setitem__(1, "x"), m.__setitem__(b"b", 1)], ())),
        ("setitem, unhashable", _after(lambda m: m.__setitem__([], "v"))),
        ("setitem over values not a list", _after(lambda m: [m.set_all("t", "xyz"), m.__setitem__("t", "w")], ())),
        # Reading one.
        ("getitem", _after(lambda m: [m["a"], m["b"]])),
        ("getitem, missing", _after(lambda m: m["missing"])),
        ("getitem, empty values", _after(lambda m: [m._metadata.__setitem__("e", []), m["e"]])),
        ("getitem, values a tuple", _after(lambda m: [m.set_all("t", ("x", "y")), m["t"]])),
        ("getitem, keys not str", _after(lambda m: [m.add(1, "x"), m[1]])),
        ("getitem, unhashable", _after(lambda m: m[[]])),
        ("getitem, a tuple key", _after(lambda m: m[("t", 1)])),
        ("get", _after(lambda m: [m.get("a"), m.get("?"), m.get("?", "d"), m.get("?", default=1)])),
        ("get, empty values", _after(lambda m: [m._metadata.__setitem__("e", []), m.get("e", "d")])),
        ("get, unhashable", _after(lambda m: m.get([]))),
        ("get_all", _after(lambda m: [m.get_all("a"), m.get_all("a") is vars(m)["_metadata"]["a"]])),
        ("get_all, missing", _after(lambda m: [m.get_all("x"), m.get_all("x") is m.get_all("x")])),
        ("get_all, keys not str", _after(lambda m: [m.add(1, "x"), m.get_all(1), m.get_all([])])),
        ("contains", _after(lambda m: ["a" in m, "missing" in m, "" in m])),
        ("contains, keys not str", _after(lambda m: [m.add(1, "x"), 1 in m, b"a" in m, None in m])),
        ("contains, unhashable", _after(lambda m: [] in m)),
        ("contains, a plain dict", _after(lambda m: [_holding({"a": 1})(m), "a" in m], ())),
        ("len", _after(len)),
        ("len, empty", _after(len, ())),
        ("len, values a str", _after(lambda m: [m.set_all("s", "abc"), len(m)])),
        ("len, values without a length", _after(lambda m: [m.set_all("s", 5), len(m)])),
        ("len, a plain dict", _after(lambda m: [_holding({"a": ["1", "2"]})(m), len(m)], ())),
        ("len without _metadata", _after(lambda m: [vars(m).pop("_metadata"), len(m)], ())),
        # Iterating one, changing it on the way.
        ("tuple()", lambda cls: tuple(cls(*PAIRS))),
        ("tuple(), empty", lambda cls: tuple(cls())),
        ("iteration, a value added to the current key", lambda cls: _iterated(cls, lambda m: m.add("a", "late"))),
        ("iteration, a key added", lambda cls: _iterated(cls, lambda m: m.add("new", "x"))),
        ("iteration, a key deleted", lambda cls: _iterated(cls, lambda m: m.delete_all("b"))),
        ("iteration, a value replaced", lambda cls: _iterated(cls, lambda m: m.__setitem__("b", "B"))),
        ("iteration, metadata replaced first", lambda cls: _iterated(cls, _holding(OrderedDict(z=["1"])), True)),
        ("iteration, a plain dict", lambda cls: _iterated(cls, _holding({"z": ["1", "2"]}), True)),
        ("iteration, values a tuple", lambda cls: _iterated(cls, lambda m: m.set_all("b", ("x", "y")), True)),
        ("iteration, values not iterable", lambda cls: _iterated(cls, lambda m: m.set_all("b", 5), True)),
        ("iteration, values emptied", lambda cls: _iterated(cls, lambda m: m.set_all("b", []), True)),
        ("iteration, without _metadata", lambda cls: _iterated(cls, lambda m: delattr(m, "_metadata"), True)),
        ("iteration, added to after its end", _added_to_after_its_end),
        ("iteration, asked from within", _reentered),
        # Comparing, printing, pickling, copying one.
        ("equality", lambda cls: [cls(*PAIRS) == cls(*PAIRS), cls(*PAIRS) == tuple(cls(*PAIRS)), cls(*PAIRS) == PAIRS,
                      cls() == ()]),
        ("repr", lambda cls: [repr(cls(*PAIRS)), repr(cls())]),
        ("pickling", _pickled),
        ("deepcopy", lambda cls: copy.deepcopy(cls(*PAIRS))),
    ]  # fmt: skip


def init_metadata_arguments(metadata_class: Any, Entry: Any, Hashing: Any) -> list[tuple[str, tuple[Any, Any]]]:
    """What the gate passes _init_metadata(metadata, compression): every kind of metadata a call is given."""
    compression = sys.modules["grpc"].Compression  # imported with grpc.aio, whose Metadata this is
    given = {"None": None, "()": (), "[]": [], "pairs": PAIRS, "entries": tuple(Entry(*pair) for pair in PAIRS),
             "a list of pairs": list(PAIRS), "a Metadata": metadata_class(*PAIRS),
             "an empty Metadata": metadata_class(), "a subclass's": type("Sub", (metadata_class,), {})(*PAIRS),
             "an iterator": iter(()), "'ab'": "ab", "a bad pair": (("k",),),
             "a bad pair last": (*PAIRS, ("k", "v", "x"))}  # fmt: skip
    given["a key's hash empties a later pair"] = ((Hashing("a", (later := ["k", "v"]).clear), "x"), later)
    return [(label, (metadata, None)) for label, metadata in given.items()] + [
        ("pairs, gzip", (PAIRS, compression.Gzip)), ("None, gzip", (None, compression.Gzip)),
        ("pairs, no compression", (PAIRS, compression.NoCompression))]  # fmt: skip


def init_metadata_answer(args: tuple[Any, Any], init_metadata: Any) -> Any:
    """What the gate compares of _init_metadata(*args): what it gave, and whether that is the metadata it was given."""
    result = init_metadata(*args)
    return [seen(result), result is args[0]]
