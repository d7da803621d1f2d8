"""Metadata made from keys and pairs that run Python code at the worst moment: hypothesis strategies of scenarios.

A scenario is data (pairs, how the Metadata is made, what a hashed key does); ``run(scenario, cls, init_metadata)``
makes fresh objects from it each time, so that stock grpc and patched grpc each get their own.
"""

import collections
import dataclasses

from helpers import probes
from hypothesis import strategies as st

Entry, Hashing, OwnIteration = probes.made()

CONTAINERS = ("tuple", "list", "entry", "own iteration", "list subclass", "short tuple", "long list")
KEYS = ("str", "hashing", "str subclass", "bytes subclass", "int")
MAKERS = ("Metadata(*pairs)", "from_tuple", "_create", "_init_metadata", "__init__ again", "__init__, an own add")
ACTIONS = (
    "nothing",
    "empty the list pairs",
    "shorten the list pairs",
    "lengthen the list pairs",
    "replace _metadata",
    "delete _metadata",
    "add a key to _metadata",
    "rebind the class's add",
    "give the instance an add",
)


class ListPair(list):
    pass


class SubKey(str):
    pass


class BytesKey(bytes):
    def __hash__(self):
        return bytes.__hash__(self)


@dataclasses.dataclass(frozen=True)
class Scenario:
    pairs: tuple  # (key kind, key text, value, container)
    maker: str
    action: str


PAIR = st.tuples(
    st.sampled_from(KEYS), st.sampled_from(["a", "b", "user-agent"]), st.sampled_from(["1", b"2", None]),
    st.sampled_from(CONTAINERS),
)  # fmt: skip
SCENARIO = st.builds(Scenario, st.lists(PAIR, max_size=5).map(tuple), st.sampled_from(MAKERS), st.sampled_from(ACTIONS))


class _Objects:
    """What one run of a scenario made: its list pairs, the instance being made again (if any), the class; and
    whether it still runs (a key hashed after it, to be compared or printed, does nothing more)."""

    def __init__(self, cls):
        self.cls = cls
        self.lists = []
        self.instance = None
        self.own_add = cls.__dict__.get("add", cls.add)
        self.running = True


def _act(action, objects):
    """What a hashing key does when hashed."""
    if not objects.running:
        return
    if action == "empty the list pairs":
        for pair in objects.lists:
            pair.clear()
    elif action == "shorten the list pairs":
        for pair in objects.lists:
            del pair[1:]
    elif action == "lengthen the list pairs":
        for pair in objects.lists:
            pair.append("more")
    elif action == "rebind the class's add":
        own_add = objects.own_add
        objects.cls.add = lambda self, key, value: own_add(self, key, ("rebound", value))
    elif objects.instance is not None:
        if action == "replace _metadata":
            objects.instance._metadata = collections.OrderedDict(z=["1"])
        elif action == "delete _metadata":
            objects.instance.__dict__.pop("_metadata", None)
        elif action == "add a key to _metadata":
            objects.instance.__dict__.get("_metadata", {})["late"] = ["x"]
        elif action == "give the instance an add":
            objects.instance.add = lambda key, value: None


def _key(kind, text, objects, action):
    if kind == "hashing":
        return Hashing(text, lambda: _act(action, objects))
    return {"str": str, "str subclass": SubKey, "bytes subclass": lambda t: BytesKey(t.encode()), "int": len}[kind](
        text
    )


def _pair(container, key, value, objects):
    if container in ("list", "list subclass", "long list"):
        pair = (ListPair if container == "list subclass" else list)([key, value])
        if container == "long list":
            pair.append("surplus")
        objects.lists.append(pair)
        return pair
    shapes = {
        "tuple": tuple,
        "entry": lambda p: Entry(*p),
        "own iteration": OwnIteration,
        "short tuple": lambda p: p[:1],
    }
    return shapes[container]((key, value))


def run(scenario, cls, init_metadata, init_metadata_class):
    """Make a Metadata as the scenario says, on ``cls``, or with ``init_metadata``, which makes an
    ``init_metadata_class``; the class's add is always put back."""
    if scenario.maker == "_init_metadata":
        cls = init_metadata_class
    objects = _Objects(cls)
    pairs = tuple(
        _pair(container, _key(kind, text, objects, scenario.action), value, objects)
        for kind, text, value, container in scenario.pairs
    )
    try:
        if scenario.maker == "Metadata(*pairs)":
            return cls(*pairs)
        if scenario.maker == "from_tuple":
            return cls.from_tuple(pairs)
        if scenario.maker == "_create":
            return cls._create(pairs) if hasattr(cls, "_create") else cls.from_tuple(pairs)
        if scenario.maker == "_init_metadata":
            return init_metadata(pairs)
        objects.instance = cls(("old", "value"))
        if scenario.maker == "__init__, an own add":
            objects.instance.add = lambda key, value: objects.instance.__dict__.setdefault("added", []).append(key)
        objects.instance.__init__(*pairs)
        return objects.instance
    finally:
        objects.running = False
        if "add" in cls.__dict__:
            cls.add = objects.own_add
