"""Patched grpc behaves as stock grpc: each case runs one scenario on stock grpc, then on patched grpc, and compares.

A scenario builds its own objects each time it runs. It runs on stock grpc first (the autouse fixture stock_grpc
starts every test with it), then under fastcommon.patched() with warnings as errors. What it returns (plain data:
results, which user code ran and how often, the state left) and what it raised (type and text) must be equal.
"""

import collections
import gc
import inspect
import pickle
import typing
import weakref

import helpers
import pytest
from conftest import GRPC_METADATA_ORIGINALS, NEEDS_GRPCIO
from helpers import assert_like_stock, outcome

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

from grpc.aio import Metadata  # noqa: E402  (grpc's own class: patch() replaces methods on it)
from grpc.aio._channel import _BaseMultiCallable  # noqa: E402


def replaceable_of(label):
    """The replaceable a scenario's label names: "get, a Key" is Metadata.get; "list" iterates; "len" is __len__."""
    word = label.split(",")[0].split("(")[0].removeprefix("Metadata.").strip()
    word = {
        "len": "__len__",
        "list": "__iter__",
        "tuple": "__iter__",
        "getitem": "__getitem__",
        "contains": "__contains__",
        "setitem": "__setitem__",
        "__init__ again": "__init__",
    }.get(word, word)
    return "_BaseMultiCallable._init_metadata" if word == "_init_metadata" else f"Metadata.{word}"  # fmt: skip


def held(metadata):
    """What a Metadata holds, read without running its methods or its keys' __hash__/__eq__."""
    found = vars(metadata).get("_metadata")
    return [(str(key), values) for key, values in dict.items(found)] if isinstance(found, dict) else repr(found)


# ---------------------------------------------------------------- grpc.aio's Metadata


@pytest.mark.parametrize("name", sorted(GRPC_METADATA_ORIGINALS))
def test_a_replaced_method_answers_for_itself_as_grpcs_own(name):
    """Its names, doc, annotations, type hints, signature; pickled by reference, it comes back as itself."""

    def scenario():
        found = getattr(helpers.owner(name)[0], name.rpartition(".")[2])  # as users reach it: Metadata.get
        function = getattr(found, "__func__", found)
        return [
            function.__name__, function.__qualname__, function.__module__, function.__doc__,
            function.__annotations__, typing.get_type_hints(function), str(inspect.signature(found)),
            pickle.loads(pickle.dumps(found)) == found,
        ]  # fmt: skip

    assert_like_stock(scenario, name)


class StopsAtIter:
    """Values whose __iter__ raises StopIteration: code the iteration runs, as a generator runs it."""

    def __iter__(self):
        raise StopIteration("from __iter__")


class StopsAtMetadata(Metadata):
    """A Metadata whose _metadata raises StopIteration when read."""

    @property
    def _metadata(self):
        raise StopIteration("from _metadata")

    @_metadata.setter
    def _metadata(self, value):
        pass


STOPPING = {
    "values first": lambda: [metadata := Metadata(), metadata.set_all("a", StopsAtIter()), metadata][-1],
    "values midway": lambda: [metadata := Metadata(("a", "1")), metadata.set_all("b", StopsAtIter()), metadata][-1],
    "_metadata": StopsAtMetadata,
}


@pytest.mark.parametrize("case", sorted(STOPPING))
def test_a_stop_iteration_raised_by_code_the_iteration_runs_becomes_runtime_error_as_in_a_generator(case):
    """PEP 479: the iterator raises RuntimeError from the StopIteration, as grpc's generator does, and drops no
    header silently."""

    def scenario():
        made = STOPPING[case]()
        iterator = iter(made if isinstance(made, Metadata) else Metadata())
        taken = []
        try:
            taken.extend(iterator)
        except RuntimeError as error:
            cause, context = error.__cause__, error.__context__
            return (
                taken,
                str(error),
                type(cause),
                str(cause),
                cause is context,
                error.__suppress_context__,
                list(iterator),
            )
        return taken, "no error"

    assert_like_stock(scenario, "Metadata.__iter__")


def test_the_iterator_is_weakly_referenced_as_a_generator_is():
    def scenario():
        iterator = iter(Metadata(("a", "1")))
        reference = weakref.ref(iterator)
        alive = reference() is iterator
        del iterator
        return alive, reference() is None

    assert_like_stock(scenario, "Metadata.__iter__")


def steps(iterator, count):
    """``count`` next() calls: each item (a value not a str shown by its type), the end, or the error."""
    taken = []
    for _ in range(count):
        try:
            taken.append(tuple(part if isinstance(part, str) else type(part).__name__ for part in next(iterator)))
        except StopIteration:
            taken.append("end")
        except Exception as exc:
            taken.append((type(exc).__name__, str(exc)))
    return taken


def test_reading_a_metadata_makes_no_attribute_dict_for_its_ordered_dict():
    """Whether its OrderedDict has attributes of its own is looked up, not made (the abi3 build made one: a review)."""

    def scenario():
        metadata = Metadata(("a", "1"))
        reads = [len(metadata), list(metadata), metadata.get_all("a"), "a" in metadata, metadata["a"]]
        return reads, [type(referent).__name__ for referent in gc.get_referents(metadata._metadata)]

    assert_like_stock(scenario, *map(replaceable_of, ("len", "list", "get_all", "contains", "getitem")))


@pytest.mark.parametrize("ending", ["its last item", "an empty Metadata", "an error"])
def test_an_ended_iterator_lets_go_of_its_metadata(ending):
    """An iterator that has ended (after its last item, or an error) no longer holds the Metadata or its dict."""

    def scenario():
        metadata = Metadata() if ending == "an empty Metadata" else Metadata(("a", "1"), ("b", "2"))
        if ending == "an error":
            metadata.set_all("b", 5)  # not iterable: the iteration raises TypeError there
        iterator, ordered = iter(metadata), metadata._metadata
        taken = steps(iterator, 4)
        refs = weakref.ref(metadata), weakref.ref(ordered)
        del metadata, ordered  # nothing else holds them but the iterator, if it still does (no cycle: no collector)
        return taken, [ref() is None for ref in refs]

    assert_like_stock(scenario, "Metadata.__iter__")


class Key(str):
    """A str key whose __hash__ and __eq__ record each call in ``log``, then call ``then(kind)`` when it is set."""

    def __new__(cls, text, log):
        made = super().__new__(cls, text)
        made.log, made.then = log, None
        return made

    def __hash__(self):
        self.log.append(("hash", str(self)))
        if self.then is not None:
            self.then("hash")
        return str.__hash__(self)

    def __eq__(self, other):
        self.log.append(("eq", str(self)))
        if self.then is not None:
            self.then("eq")
        return str.__eq__(self, other)


def raising(error, kind):
    def then(called):
        if called == kind:
            raise error("said by a key")

    return lambda metadata: then


def rebinding(metadata):
    """On the first __eq__, the Metadata gets a new, empty _metadata."""

    def then(kind):
        if kind == "eq" and not vars(metadata).get("rebound"):
            metadata.rebound, metadata._metadata = True, collections.OrderedDict()

    return then


KEY_ACTIONS = {
    "len": (len, None),
    "list": (list, None),
    "tuple": (tuple, None),
    "get": (lambda m, log: m.get("a"), None),
    "getitem": (lambda m, log: m["a"], None),
    "get_all": (lambda m, log: m.get_all("a"), None),
    "contains": (lambda m, log: "a" in m, None),
    "add": (lambda m, log: m.add("a", "x"), None),
    "add, a new key": (lambda m, log: m.add("c", "x"), None),
    "setitem": (lambda m, log: m.__setitem__("a", "x"), None),
    "get, a Key": (lambda m, log: m.get(Key("a", log)), None),
    "add, a Key": (lambda m, log: m.add(Key("a", log), "x"), None),
    "len, a hash that raises": (len, raising(ValueError, "hash")),
    "list, a hash that raises": (list, raising(ValueError, "hash")),
    "add, an __eq__ that rebinds _metadata": (lambda m, log: m.add("a", "x"), rebinding),
    **{
        f"{method}, an __eq__ raising {error.__name__}": (action, raising(error, "eq"))
        for method, action in (("get", lambda m, log: m.get("a", "default")), ("getitem", lambda m, log: m["a"]))
        for error in (ValueError, IndexError, KeyError, TypeError)
    },
}


@pytest.mark.parametrize("action", sorted(KEY_ACTIONS))
def test_keys_that_run_code_in_hash_and_eq_see_what_they_see_with_stock_grpc(action):
    """str subclass keys held in _metadata: each method gives the same result and runs their __hash__/__eq__
    as often, with the same effects, as stock grpc."""
    act, then_for = KEY_ACTIONS[action]

    def scenario():
        log = []
        metadata = Metadata()
        keys = [Key("a", log), Key("b", log)]
        metadata.set_all(keys[0], ["1"]), metadata.set_all(keys[1], ["2", "3"])
        del log[:]
        for key in keys:
            key.then = then_for(metadata) if then_for else None
        result = outcome(lambda: act(metadata) if act in (len, list, tuple) else act(metadata, log))
        calls = list(log)
        for key in keys:
            key.then = None
        return result, calls, held(metadata)

    assert_like_stock(scenario, replaceable_of(action))


def finalizing(action):
    """A Metadata (a: 1, D; b: 2), where D's __del__ does ``action``; iterated to D, "a" then set to ["new"] (the
    iterator alone holds the old list, and so D), iterated on."""

    def scenario(last=False):
        metadata, log = Metadata(("a", "1"), ("b", "2")), []

        class D:
            def __del__(self):
                log.append(outcome(lambda: action(metadata, iterator)))

        key = "b" if last else "a"
        metadata._metadata[key].append(D())
        iterator = iter(metadata)
        taken = steps(iterator, 3 if last else 2)
        metadata.set_all(key, ["new"])
        return taken + steps(iterator, 3), log, held(metadata)

    return scenario


FINALIZERS = {
    "adds a key": lambda metadata, iterator: metadata._metadata.__setitem__("c", ["3"]),
    "replaces the next key's values": lambda metadata, iterator: metadata._metadata.__setitem__("b", ["B"]),
    "asks the iterator for its next item": lambda metadata, iterator: next(iterator),
}


class Noted:
    """An object that notes in ``log`` when it goes."""

    def __init__(self, log, name):
        self.log, self.name = log, name

    def __del__(self):
        self.log.append(f"{self.name} goes")


def _only_the_iterator_holds_its_metadata():
    log = []
    metadata = Metadata(("a", "1"), ("b", "2"))
    metadata.extra = Noted(log, "the Metadata")  # an instance with an extended __dict__
    iterator = iter(metadata)
    log.append(steps(iterator, 1))
    del metadata
    log.append("deleted")
    log.append(steps(iterator, 3))
    return log


def _values_not_a_list_kept_as_the_generator_keeps_them():
    log = []

    class Values:  # iterable; its iterator does not hold it
        def __init__(self, *items):
            self.items, self.noted = list(items), Noted(log, "the values")

        def __iter__(self):
            return iter(self.items)

    metadata = Metadata(("a", "1"))
    metadata._metadata["k"] = Values("x", "y")
    iterator = iter(metadata)
    log.append(steps(iterator, 2))
    metadata._metadata["k"] = ["replaced"]  # the same keys: the iteration goes on over what it holds
    log.append("replaced")
    log.append(steps(iterator, 3))
    return log


def _asked_again_by_a_value_as_it_ends():
    log, state = [], {}

    class Asks:
        def __del__(self):
            if "iterator" in state:
                state["b"].append("late")  # the list at hand has more, for an iterator that has not ended
                log.append(("asked again", steps(state.pop("iterator"), 1)))

    metadata = Metadata(("a", Asks()), ("b", "2"))
    state["b"] = metadata.get_all("b")
    state["iterator"] = iterator = iter(metadata)
    del metadata
    log.append(steps(iterator, 3))
    state.clear()
    return log


def _the_value_last_yielded_removed_from_its_list():
    log = []
    metadata = Metadata(("a", Noted(log, "the first value")), ("a", "x"), ("b", "2"))
    iterator = iter(metadata)
    log.append(steps(iterator, 1)[0][0])
    del metadata["a"]  # grpc's __delitem__ empties the list: the generator still holds the value it yielded
    log.append("deleted")
    log.append(steps(iterator, 1))
    return log


def _the_end_with_the_iterator_alone_holding_everything(replaced):
    def scenario():
        log = []
        metadata = Metadata(("a", Noted(log, "a value")), ("a", Noted(log, "the last value")), ("b", "2"))
        metadata.extra = Noted(log, "the Metadata")
        iterator = iter(metadata)
        log.append(steps(iterator, 2))
        if replaced:  # the old OrderedDict then held by the iterator alone
            metadata._metadata = collections.OrderedDict()
        del metadata
        log.append(steps(iterator, 3))
        return log

    return scenario


def _a_custom_metadata_replaced_midway():
    log = []

    class Custom:  # what its items() returns does not hold it
        def items(self):
            return [("a", ["1"]), ("b", ["2"])]

    metadata = Metadata()
    metadata._metadata = Custom()
    metadata._metadata.noted = Noted(log, "the old _metadata")
    iterator = iter(metadata)
    log.append(steps(iterator, 1))
    metadata._metadata = collections.OrderedDict()
    log.append("replaced")
    log.append(steps(iterator, 3))
    return log


ITERATOR_LIVES = {
    "its Metadata, held by the iterator alone": _only_the_iterator_holds_its_metadata,
    "the value last yielded, removed from its list": _the_value_last_yielded_removed_from_its_list,
    "at the end, the iterator alone holding the Metadata": _the_end_with_the_iterator_alone_holding_everything(False),
    "at the end, the iterator alone holding the old OrderedDict": _the_end_with_the_iterator_alone_holding_everything(
        True
    ),
    "a _metadata of another type, replaced midway": _a_custom_metadata_replaced_midway,
    "values that are not a list": _values_not_a_list_kept_as_the_generator_keeps_them,
    "a value that asks for more as the iterator ends": _asked_again_by_a_value_as_it_ends,
}


@pytest.mark.parametrize("case", sorted(ITERATOR_LIVES))
def test_the_iterator_holds_what_the_generator_holds_for_as_long(case):
    """What the iterator holds (the Metadata, the values at hand) goes when the generator's would: seen by
    finalizers, and one that asks for more as it ends finds it ended."""
    assert_like_stock(ITERATOR_LIVES[case], "Metadata.__iter__")


@pytest.mark.parametrize("method", ["__len__", "__iter__", "__getitem__", "get_all", "__contains__"])
def test_methods_take_their_parameters_by_name_as_grpcs_do(method):
    """Metadata.__len__(self=m), Metadata.get_all(self=m, key=k): as grpc's own take them."""

    def scenario():
        metadata = Metadata(("a", "1"))
        call = getattr(Metadata, method)
        arguments = {"self": metadata} if method in ("__len__", "__iter__") else {"self": metadata, "key": "a"}
        result = outcome(lambda: call(**arguments))
        return list(result[2]) if method == "__iter__" and result[0] == "returned" else result

    assert_like_stock(scenario, replaceable_of(method))


@pytest.mark.parametrize("last", [False, True], ids=["a list midway", "the last list"])
@pytest.mark.parametrize("finalizer", sorted(FINALIZERS))
def test_a_finalizer_run_by_the_iteration_sees_what_it_sees_with_stock_grpc(finalizer, last):
    """A value's __del__ that runs when the iteration lets go of an old values list: it runs at the same point."""
    assert_like_stock(lambda: finalizing(FINALIZERS[finalizer])(last), "Metadata.__iter__")


class Attrs(dict):
    """An instance __dict__; a subclass of dict, so that CPython's specializer does not read it (which would run the
    keys' __eq__ now and then, stock grpc's own count varying from one run to the next)."""


HELD = {
    "an OrderedDict": lambda: collections.OrderedDict(a=["1"], b=["2"]),
    "a dict": lambda: {"a": ["1"], "b": ["2"]},
    "an OrderedDict subclass": lambda: type("Ordered", (collections.OrderedDict,), {})(a=["1"], b=["2"]),
    "tuple values": lambda: collections.OrderedDict(a=("1",), b=["2"]),
    "empty values": lambda: collections.OrderedDict(a=[], b=["2"]),
}
METHODS = {
    "len": len,
    "list": list,
    "get": lambda m: m.get("a"),
    "getitem": lambda m: m["a"],
    "get_all": lambda m: m.get_all("a"),
    "contains": lambda m: "a" in m,
    "add": lambda m: m.add("a", "x"),
    "setitem": lambda m: m.__setitem__("a", "x"),
    "__init__ again": lambda m: m.__init__(("a", "1"), ("b", "2"), ("c", "3")),
}


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("holding", sorted(HELD))
def test_a_replaced_instance_dict_is_read_as_often_as_stock_grpc_reads_it(holding, method):
    """m.__dict__ replaced by a dict (and an extra key) whose "_metadata" is a Key: each method reads _metadata as
    many times as stock grpc (the Key's __eq__ runs once a read), with the same result, whatever _metadata holds."""

    def scenario():
        log = []
        metadata = Metadata()
        metadata.__dict__ = Attrs({Key("_metadata", log): HELD[holding](), "extra": 1})
        del log[:]
        result = outcome(lambda: METHODS[method](metadata))
        return result, list(log), held(metadata)

    assert_like_stock(scenario, replaceable_of(method))


def _with_methods_of_its_own(metadata):
    """m._metadata, an exact OrderedDict, given items/values/get of its own (an OrderedDict instance has a __dict__)."""
    held = metadata._metadata
    held.items = lambda: [("x", ["from items()"])]
    held.values = lambda: [[1, 2, 3, 4, 5]]
    held.get = lambda key, default: ["from get()"]
    return metadata


@pytest.mark.parametrize("method", sorted(METHODS))
def test_an_ordered_dict_with_methods_of_its_own_is_asked_as_stock_grpc_asks_it(method):
    """grpc's methods call m._metadata.items(), .values(), .get(): an instance's own are called, as with grpc."""

    def scenario():
        metadata = _with_methods_of_its_own(Metadata(("a", "1"), ("b", "2")))
        return outcome(lambda: METHODS[method](metadata)), held(metadata)

    assert_like_stock(scenario, replaceable_of(method))


class Sliced:
    """What an own get_all may return: its slices are not iterable."""

    __getitem__ = staticmethod(lambda index: 5)


def own_get_all(returned):
    """m[k] = v, m having a get_all of its own that returns ``returned()``."""

    def scenario(metadata, added):
        metadata.get_all = lambda key: returned()
        metadata["a"] = "new"

    return scenario


def own_add(metadata, added):
    """__init__ again, m having an add of its own."""
    metadata.add = lambda key, value: added.append((key, value))
    metadata.__init__(("a", "1"), ["b", "2"])


OWN_ATTRIBUTES = {
    "get_all, an int": own_get_all(lambda: 5),
    "get_all, None": own_get_all(lambda: None),
    "get_all, non-iterable slices": own_get_all(Sliced),
    "get_all, a tuple": own_get_all(lambda: ("p", "q")),
    "add": own_add,
}


@pytest.mark.parametrize("attribute", sorted(OWN_ATTRIBUTES))
def test_instance_level_methods_are_used_as_stock_grpc_uses_them(attribute):
    """A Metadata with its own get_all (used by m[k] = v) or add (used by __init__): the same result, state and
    error text as with stock grpc."""

    def scenario():
        metadata, added = Metadata(("a", "1")), []
        return outcome(lambda: OWN_ATTRIBUTES[attribute](metadata, added)), added, held(metadata)

    assert_like_stock(scenario, "Metadata.__init__" if attribute == "add" else "Metadata.__setitem__")


CALLS = {
    "get()": lambda: Metadata().get(),
    "get(k, d, extra)": lambda: Metadata().get("a", 1, 2),
    "get(k, x=)": lambda: Metadata().get("a", x=1),
    "get_all()": lambda: Metadata().get_all(),
    "get_all(key=)": lambda: Metadata(("a", "1")).get_all(key="a"),
    "add(k)": lambda: Metadata().add("a"),
    "__getitem__()": lambda: Metadata().__getitem__(),
    "__setitem__(k)": lambda: Metadata().__setitem__("a"),
    "__len__(x)": lambda: Metadata().__len__(1),
    "__iter__(x)": lambda: Metadata().__iter__(1),
    "__contains__(key=)": lambda: Metadata().__contains__(key="a"),
    "from_tuple()": lambda: Metadata.from_tuple(),
    "_init_metadata(x, y, z)": lambda: _BaseMultiCallable._init_metadata(1, 2, 3),
    "Metadata.add()": lambda: Metadata.add(),
    "Metadata.__len__()": lambda: Metadata.__len__(),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_calls_with_the_wrong_arguments_fail_as_with_stock_grpc(call):
    """A method called with too few, too many or unknown arguments raises what grpc's raises; the text is Cython's
    argument parsing's (docs/safety.md), which names the method too."""

    def kind_of_failure():
        kind, *observed = outcome(CALLS[call])
        return kind, observed[0], observed[1].split("(")[0].rpartition(".")[2] if kind == "raised" else None

    assert_like_stock(kind_of_failure, replaceable_of(call))


@pytest.mark.parametrize(
    "call", [lambda: Metadata(x=1), lambda: Metadata(("a", "1"), key="k"), lambda: Metadata.__init__()]
)
def test_a_metadata_made_with_the_wrong_arguments_fails_in_grpcs_words(call):
    """Metadata(...) with keywords, or __init__ without an instance: grpc's own error, word for word."""
    assert_like_stock(call, "Metadata.__init__")
