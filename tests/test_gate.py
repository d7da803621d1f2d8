"""The patch gate: what it judges of the installed grpc (fingerprints, probes, the entry class's shape, the Metadata
class), what it leaves to grpc where grpc changed, with one warning naming it, what it does not know, and that judging
changes nothing of grpc's."""

import collections
import contextlib
import functools
import logging
import sys
import threading
import warnings

import pytest
from conftest import NEEDS_GRPCIO

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import changed_grpc
import changed_metadata
import helpers
from changed_grpc import decode_with_an_unprobed_branch, zero_copy_deserialize
from conftest import FUNCTIONS, GRPC_HOOKS, GRPC_METADATA_ORIGINALS, GRPC_METADATUM, GRPC_ORACLE, expected_patch
from grpc import _common as grpc_common
from grpc import _observability
from grpc._cython import cygrpc
from grpc.aio import _channel
from grpc.aio import _metadata as grpc_metadata
from helpers import captured_grpc_records

import fastcommon

PATCHED = expected_patch()
BEYOND_FUNCTIONS = PATCHED[len(FUNCTIONS) :]  # _Metadatum and the aio Metadata methods, where this build offers them
GRPCS_OWN = {**GRPC_ORACLE, "_Metadatum": GRPC_METADATUM, **GRPC_METADATA_ORIGINALS, **GRPC_HOOKS}
TESTED = ", ".join(helpers.TESTED_GRPCIO)  # the releases the registry's fingerprints name
MADE_UP_CHANGES = {**changed_grpc.MADE_UP_CHANGES, **changed_metadata.MADE_UP_CHANGES}


def offered(*names):
    """Skip a test where this build offers nothing for one of ``names`` (pure Python; abi3, for the entry class)."""
    missing = [name for name in names if name not in PATCHED]
    return pytest.mark.skipif(bool(missing), reason=f"this build offers nothing for {', '.join(missing)}")


def patch_expecting_one_warning():
    with pytest.warns(fastcommon.FastcommonWarning) as warned:
        replaced = fastcommon.patch()
    assert len(warned) == 1
    return replaced, str(warned[0].message)


# ------------------------------------------------------------------ what it knows


def test_the_installed_grpcio_is_one_the_gate_knows():
    # Every name the gate judges: the fingerprints of the functions and methods, the entry class's shape. What it
    # does not know is printed as the fingerprint to add to the registry, once the whole suite passes against it.
    assert helpers.unknown() == {}, f"grpcio {grpc.__version__}: {helpers.unknown()}"


def test_what_the_gate_does_not_know_is_named_with_the_entry_to_add(monkeypatch):
    monkeypatch.setattr(grpc_common, "decode", decode_with_an_unprobed_branch)
    found = helpers.fingerprint(decode_with_an_unprobed_branch)
    entry = f'"{found}": ("{grpc.__version__}",),  # in the fingerprints of decode in src/fastcommon/_registry.py'
    assert helpers.unknown() == {"decode": entry}


# ------------------------------------------------------------------ judging changes nothing


@pytest.mark.parametrize("log_threads", [True, False])
def test_probing_leaves_no_log_records(caplog, monkeypatch, log_threads):
    monkeypatch.setattr(logging, "logThreads", log_threads)  # False: records carry no thread id
    caplog.set_level(logging.DEBUG)
    with fastcommon.patched():
        pass
    assert caplog.records == []


@pytest.mark.parametrize("adapter", [False, True])
def test_probing_leaves_no_records_on_a_logger_bound_to_grpc_common(monkeypatch, adapter):
    """A user's logger (or an adapter of it) bound to grpc._common._LOGGER before patch() gets none of its probes."""
    from grpc import _common as grpc_common

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    own = logging.getLogger("test_patch.bound")
    own.addHandler(handler)
    monkeypatch.setattr(grpc_common, "_LOGGER", logging.LoggerAdapter(own, {}) if adapter else own)
    try:
        with fastcommon.patched() as replaced:
            assert "serialize" in replaced
    finally:
        own.removeHandler(handler)
    assert records == []


def test_while_the_gate_probes_only_its_probes_failures_are_kept_from_grpcs_logger():
    """In the probing thread, fastcommon's functions log a probe's failure on the gate's recorder; any other failure
    (a finalizer's in that thread, another thread's) reaches grpc._common's logger as it would have."""
    recorder = helpers.Recorder()

    def probe(message):
        raise recorder.error("probe")

    with captured_grpc_records() as records, helpers.probing(recorder):
        thread = threading.Thread(target=fastcommon.serialize, args=(b"x", lambda message: 1 / 0))
        thread.start()
        thread.join(timeout=30)
        fastcommon.serialize(b"x", lambda message: 1 / 0)
        fastcommon.serialize(b"x", probe)
    assert [(message, kind) for _, _, message, kind, _ in records] == [
        ("Exception serializing message!", ZeroDivisionError)
    ] * 2
    assert recorder.records == [(logging.ERROR, "Exception serializing message!", recorder.error, "probe")]


class Spy(logging.Filter, logging.Handler):
    """A user's filter and handler on grpc's loggers, which counts every record that reaches it."""

    def __init__(self):
        logging.Handler.__init__(self)
        self.seen = 0

    def filter(self, record):
        self.seen += 1
        return True

    def emit(self, record):
        self.seen += 1


def observable():
    """Everything of grpc's that a user or grpc could see change: its modules' globals, its classes' attributes,
    subclasses and abc caches (and those of the ABCs its code asks), its loggers, linecache, the loaded modules."""
    import abc
    import collections.abc
    import linecache

    from grpc.aio import Metadata
    from grpc.aio._channel import _BaseMultiCallable

    classes = [Metadata, *Metadata.__mro__[1:-1], _BaseMultiCallable, GRPC_METADATUM, collections.abc.Sequence,
               collections.abc.Awaitable]  # fmt: skip
    seen = {f"module {name}": dict(vars(sys.modules[name])) for name in (*helpers.HOMES, "grpc")}
    for cls in classes:
        seen[f"class {cls.__qualname__}"] = dict(vars(cls))
        seen[f"subclasses of {cls.__qualname__}"] = cls.__subclasses__()
        if isinstance(cls, abc.ABCMeta):
            seen[f"abc of {cls.__qualname__}"] = [{ref() for ref in refs} for refs in abc._get_dump(cls)[:3]]
    for name in ("grpc._common", "grpc._cython.cygrpc", "grpc", ""):
        logger = logging.getLogger(name)
        seen[f"logger {name!r}"] = [list(logger.filters), list(logger.handlers), dict(logger._cache)]
    seen["linecache"], seen["modules"] = set(linecache.cache), set(sys.modules)
    return seen


def changes(before, after):
    """What differs, by the name of each part and key: an object replaced by another counts (`is`, not ==)."""
    found = []
    for part, was in before.items():
        now = after[part]
        if isinstance(was, dict):
            found += [f"{part}: {key}" for key in was.keys() | now.keys() if was.get(key, now) is not now.get(key, was)]
        elif was != now:
            found.append(part)
    return sorted(found)


def test_patch_changes_only_the_names_it_replaces_and_unpatch_puts_back_exactly_what_was_there():
    """Judging grpc's objects leaves no trace: no record for a user's filter or handler, no subclass or abc cache
    entry on grpc's classes, no global; patch() changes the names it replaces, and unpatch() puts them back."""
    import gc

    spy = Spy()
    for name in ("grpc._common", ""):
        logging.getLogger(name).addFilter(spy), logging.getLogger(name).addHandler(spy)
    gc.collect()  # what earlier tests left; none from here on, so that a probe's leftovers would show
    gc.disable()
    try:
        before = observable()
        helpers.verdicts()  # python -m fastcommon, check: judging alone
        assert changes(before, observable()) == []
        replaced = fastcommon.patch()
        where = {name: helpers.home(name) if "." not in name else None for name in replaced}
        expected = sorted(
            f"module {home}: {name}" if home else f"class {name.split('.')[0]}: {name.split('.')[1]}"
            for name, home in where.items()
        )
        assert changes(before, observable()) == expected
        fastcommon.unpatch()
        assert changes(before, observable()) == []
    finally:
        gc.enable()
        for name in ("grpc._common", ""):
            logging.getLogger(name).removeFilter(spy), logging.getLogger(name).removeHandler(spy)
    assert spy.seen == 0


def test_a_subclasshook_set_after_patch_is_asked_as_on_stock_grpc():
    """The gate's probes leave no answer in the abc caches of grpc's Metadata: a __subclasshook__ set after patch()
    is asked about the types the probes passed, and _init_metadata answers as with stock grpc."""
    from grpc.aio import Metadata
    from grpc.aio._channel import _BaseMultiCallable

    def answers():
        Metadata.__subclasshook__ = classmethod(lambda cls, other: True if other in (str, list) else NotImplemented)
        try:
            return [isinstance("ab", Metadata), isinstance([], Metadata), _BaseMultiCallable._init_metadata("ab")]
        finally:
            del Metadata.__subclasshook__
            Metadata._abc_caches_clear()

    Metadata._abc_caches_clear()
    stock = answers()
    with fastcommon.patched():
        assert answers() == stock == [True, True, "ab"]


def test_judging_runs_no_class_creation_hook_of_grpcs_metadata(monkeypatch):
    """The gate copies grpc's Metadata into classes of its own without running the __set_name__ of a descriptor a user
    put on it, or an __init_subclass__ of its: stock grpc runs neither at patch()."""
    from grpc.aio import Metadata

    ran = []

    class Once:
        def __set_name__(self, owner, name):
            ran.append(("__set_name__", owner))

        def __get__(self, instance, owner=None):
            return 1

    monkeypatch.setattr(Metadata, "tag", Once(), raising=False)
    monkeypatch.setattr(
        Metadata, "__init_subclass__", classmethod(lambda cls: ran.append(("subclass", cls))), raising=False
    )
    with fastcommon.patched() as replaced:
        assert replaced == PATCHED and ran == []


def test_a_gate_that_cannot_judge_leaves_grpcs_own_and_says_why(monkeypatch):
    """Whatever goes wrong while judging (an audit hook that refuses, a hook of a changed grpc that raises), patch()
    does not raise: what could not be judged stays grpc's, named in its one warning."""

    def refusing(*args, **kwargs):
        raise PermissionError("refused by an audit hook")

    monkeypatch.setattr(helpers._gate.functions, "difference", refusing)
    replaced, message = patch_expecting_one_warning()
    try:
        assert replaced == BEYOND_FUNCTIONS
        assert (
            "encode in grpc._common (the gate could not judge it: PermissionError('refused by an audit hook'))"
            in message
        )
    finally:
        fastcommon.unpatch()


def test_the_sequence_the_gates_probes_ask_answers_as_collections_abcs_for_every_argument_they_pass():
    import collections.abc

    from grpc.aio import Metadata

    probe = helpers.gate_copies.detached(Metadata, object)
    for label, (metadata, _) in helpers.probes.init_metadata_arguments(probe, *helpers.probes.made()[:2]):
        expected = isinstance(metadata, collections.abc.Sequence)
        assert isinstance(metadata, helpers.gate_metadata.Sequence) is expected, label


def test_patch_after_unpatch_judges_what_grpc_holds_now(monkeypatch):
    """Nothing is remembered from an earlier judgement: a global grpc's methods read, changed after unpatch(), is
    judged at the next patch(), and patched grpc answers as stock does."""
    from grpc.aio import Metadata

    def answers():
        return ["a" in Metadata(("a", "1")), b"a" in Metadata((b"a", "1"))]

    fastcommon.patch()
    fastcommon.unpatch()
    monkeypatch.setattr(grpc_metadata, "MetadataKey", bytes)  # grpcio 1.85's __contains__ asks it
    stock = answers()
    with warnings.catch_warnings(record=True):  # where grpc's differs now, it stays grpc's, with a warning
        warnings.simplefilter("always")
        fastcommon.patch()
    try:
        assert answers() == stock
    finally:
        fastcommon.unpatch()


def test_unpatch_leaves_no_reference_to_grpcs_originals(monkeypatch):
    """What fastcommon judged and replaced (here copies of grpc's decode and Metadata.get, put in their place) is
    freed once grpc holds it no more: after unpatch(), fastcommon keeps nothing of grpc's."""
    import gc
    import types
    import weakref

    copies = {}
    for owner, attribute, name in ((grpc_common, "decode", "decode"), (grpc_metadata.Metadata, "get", "Metadata.get")):
        if helpers.unavailable(name):
            continue  # pure Python, abi3: fastcommon has no replacement for it here
        own = vars(owner)[attribute]
        copies[name] = types.FunctionType(own.__code__, own.__globals__, own.__name__, own.__defaults__)
        copies[name].__qualname__ = own.__qualname__
        monkeypatch.setattr(owner, attribute, copies[name])
    try:
        assert set(copies) <= set(fastcommon.patch())
    finally:
        fastcommon.unpatch()
    monkeypatch.undo()
    freed = {name: weakref.ref(function) for name, function in copies.items()}
    del copies
    gc.collect()
    assert {name: ref() for name, ref in freed.items()} == dict.fromkeys(freed)


def test_neither_import_nor_judging_leaves_a_subclass_of_a_builtin_type():
    """The gate's probe classes (subclasses of str, bytes, tuple, Exception) are made when it probes and freed with
    the judgement: importing fastcommon makes none, and none lives on after patch() and unpatch()."""
    code = """if True:
        import gc
        bases = (str, bytes, tuple, list, dict, Exception)
        def made(): return sorted(c.__name__ for b in bases for c in b.__subclasses__() if "fastcommon" in c.__module__)
        import grpc.aio, fastcommon
        gc.collect()
        print(made())
        fastcommon.patch(), fastcommon.unpatch()
        gc.collect()
        print(made())
    """
    assert helpers.python("-c", code, check_status=0).stdout == "[]\n[]\n"


def test_patch_and_unpatch_leave_grpcs_metadata_instances_as_stock_makes_them():
    """Judging and installing make no instance of grpc's Metadata: its instances' attribute dicts (a class's shared
    keys, from CPython 3.11) are as in a process that never patched."""
    code = "import sys, grpc.aio, fastcommon; {}print(sys.getsizeof(vars(grpc.aio.Metadata(('a', '1')))))"
    stock, patched = (
        helpers.python("-c", code.format(then), check_status=0).stdout
        for then in ("", "fastcommon.patch(), fastcommon.unpatch(); ")
    )
    assert patched == stock


# ------------------------------------------------------------------ a grpc that changed


def test_zero_copy_deserialize_is_left_to_grpc_and_the_rest_replaced(monkeypatch):
    monkeypatch.setattr(grpc_common, "deserialize", zero_copy_deserialize)
    replaced, message = patch_expecting_one_warning()
    assert replaced == ("encode", "decode", "serialize", *BEYOND_FUNCTIONS)
    assert message == (
        "fastcommon leaves deserialize in grpc._common (its code is not one fastcommon's suite ran against) to grpc "
        f"on grpcio {grpc.__version__}; fastcommon's suite ran against grpcio {TESTED} (python -m fastcommon check)"
    )
    assert grpc_common.deserialize is zero_copy_deserialize and not fastcommon.is_patched("deserialize")
    for name in replaced[: len(FUNCTIONS) - 1]:  # the functions; _Metadatum is in cygrpc
        assert getattr(grpc_common, name) is getattr(fastcommon, name) and fastcommon.is_patched(name)
    assert fastcommon.unpatch() == replaced
    assert grpc_common.deserialize is zero_copy_deserialize
    for name in replaced[: len(FUNCTIONS) - 1]:  # the functions; _Metadatum is in cygrpc
        assert getattr(grpc_common, name) is GRPC_ORACLE[name]


@pytest.mark.parametrize(
    "value, joined",
    [
        (memoryview(b"hello world"), b"hello world"),
        ([b"hello", b" ", b"world"], b"hello world"),
        ([memoryview(b"hello"), memoryview(b" world")], b"hello world"),
        ([], b""),
    ],
)
def test_the_zero_copy_model_follows_grpcs_own_test_cases(value, joined):
    handed = []
    assert zero_copy_deserialize(value, None) == joined and type(zero_copy_deserialize(value, None)) is bytes
    zero_copy_deserialize(value, handed.append)
    assert handed == [joined] and type(handed[0]) is bytes


def test_the_probes_alone_catch_zero_copy_deserialize(monkeypatch):
    helpers.trust(monkeypatch, "deserialize", zero_copy_deserialize)
    monkeypatch.setattr(grpc_common, "deserialize", zero_copy_deserialize)
    replaced, message = patch_expecting_one_warning()
    assert replaced == ("encode", "decode", "serialize", *BEYOND_FUNCTIONS)
    assert "deserialize in grpc._common (it differs on a probe: deserialize(memoryview" in message
    fastcommon.unpatch()


@pytest.mark.parametrize("gate", ["fingerprint", "probes"])
@pytest.mark.parametrize("name", sorted(MADE_UP_CHANGES))
def test_a_made_up_change_to_one_name_leaves_exactly_that_one_to_grpc_with_one_warning_naming_it(
    monkeypatch, name, gate
):
    if name not in PATCHED:
        pytest.skip(f"grpcio {grpc.__version__} has no {name}, or this build does not offer it")
    changed = MADE_UP_CHANGES[name]
    monkeypatch.setattr(*helpers.owner(name), changed)
    if gate == "probes":
        helpers.trust(monkeypatch, name, getattr(changed, "__func__", changed))
    replaced, message = patch_expecting_one_warning()
    try:
        assert replaced == tuple(other for other in PATCHED if other != name)  # the others replaced
        reason = (
            "its code is not one fastcommon's suite ran against" if gate == "fingerprint" else "it differs on a probe"
        )
        assert f"{name} in {helpers.home(name)} ({reason}" in message and f"grpcio {grpc.__version__}" in message
        assert helpers.current(name) is changed
    finally:
        fastcommon.unpatch()
    assert helpers.current(name) is changed
    assert [other for other in PATCHED if other != name and helpers.current(other) is not GRPCS_OWN[other]] == []


def test_two_changed_functions_give_one_warning_naming_both(monkeypatch):
    monkeypatch.setattr(grpc_common, "deserialize", zero_copy_deserialize)
    monkeypatch.setattr(grpc_common, "encode", MADE_UP_CHANGES["encode"])
    replaced, message = patch_expecting_one_warning()
    assert replaced == ("decode", "serialize", *BEYOND_FUNCTIONS)
    assert "leaves encode in grpc._common (" in message and "; deserialize in grpc._common (" in message
    fastcommon.unpatch()


def test_only_the_fingerprint_sees_a_change_no_probe_exercises(monkeypatch):
    name, changed = "decode", decode_with_an_unprobed_branch
    assert changed(("a", "b")) == "ab" != GRPC_ORACLE["decode"](("a", "b"))  # a real difference ...
    assert helpers.first_difference(name, changed, fastcommon.decode) is None  # ... that every probe misses
    monkeypatch.setattr(grpc_common, name, changed)
    replaced, message = patch_expecting_one_warning()
    assert "decode" not in replaced and "decode in grpc._common (its code is not one" in message
    fastcommon.unpatch()


PROBED_KINDS = {  # every kind of input grpc's callers pass or may pass: (description, test)
    "bytes": lambda v: type(v) is bytes and v.isascii(),
    "non-UTF-8 bytes": lambda v: type(v) is bytes and not v.isascii(),
    "str": lambda v: type(v) is str and "\ud800" not in v,
    "lone surrogate": lambda v: type(v) is str and "\ud800" in v,
    "memoryview": lambda v: type(v) is memoryview,
    "bytearray": lambda v: type(v) is bytearray,
    "list of bytes": lambda v: type(v) is list and v != [] and all(type(c) is bytes for c in v),
    "list of memoryviews": lambda v: type(v) is list and v != [] and all(type(c) is memoryview for c in v),
    "empty list": lambda v: v == [] and type(v) is list,
    "None": lambda v: v is None,
    "str subclass": lambda v: isinstance(v, str) and type(v) is not str,
    "bytes subclass": lambda v: isinstance(v, bytes) and type(v) is not bytes,
}


@pytest.mark.parametrize("kind", sorted(PROBED_KINDS))
@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_difference_on_any_one_kind_of_input_is_caught(name, kind):
    is_kind = PROBED_KINDS[kind]
    assert sum(map(is_kind, helpers.probe_values())) >= 1, f"no probe value is {kind}"
    original = GRPC_ORACLE[name]

    def differs_on_that_kind(*args):
        return "changed" if is_kind(args[0]) else original(*args)

    assert helpers.first_difference(name, differs_on_that_kind, getattr(fastcommon, name)) is not None


@pytest.mark.parametrize("name", ["serialize", "deserialize"])
@pytest.mark.parametrize("change", ["handed", "raises"])
def test_what_the_transformer_is_handed_and_how_failure_is_handled_are_compared(name, change):
    original = GRPC_ORACLE[name]

    def hands_a_copy(message, transformer):
        return original(bytes(message) if isinstance(message, memoryview) else message, transformer)

    def logs_differently(message, transformer):
        try:
            return message if transformer is None else transformer(message)
        except Exception:
            logging.getLogger("grpc._common").exception("something else")
            return None

    changed = hands_a_copy if change == "handed" else logs_differently
    assert helpers.first_difference(name, changed, getattr(fastcommon, name)) is not None


# ------------------------------------------------------------------ an entry class grpc changed


def a_namedtuple(fields=("key", "value"), **options):
    return collections.namedtuple("_Metadatum", fields, **options)


class WithInit(a_namedtuple()):
    __slots__ = ()

    def __init__(self, *args):
        pass


class PlainTuple(tuple):
    _fields = ("key", "value")
    __slots__ = ()


CHANGED_CLASSES = {
    "other fields": (a_namedtuple(("name", "value")), "fields ('key', 'value')"),
    "defaults": (a_namedtuple(defaults=("",)), "namedtuple's own __new__"),
    "a subclass with __init__": (WithInit, "a plain tuple subclass"),
    "a tuple subclass, no namedtuple": (PlainTuple, "namedtuple's own __new__"),
    "a dataclass-like class": (type("_Metadatum", (), {"_fields": ("key", "value")}), "a plain tuple subclass"),
}


@offered("_Metadatum")
@pytest.mark.parametrize("change", sorted(CHANGED_CLASSES))
def test_a_class_grpc_changed_stays_grpcs_with_one_warning(monkeypatch, change):
    changed, lacking = CHANGED_CLASSES[change]
    monkeypatch.setattr(cygrpc, "_Metadatum", changed)
    with pytest.warns(fastcommon.FastcommonWarning) as warned:
        replaced = fastcommon.patch()
    fastcommon.unpatch()
    assert replaced == tuple(name for name in PATCHED if name != "_Metadatum") and len(warned) == 1
    message = str(warned[0].message)
    assert "_Metadatum in grpc._cython.cygrpc (it is not the namedtuple fastcommon builds (it lacks: " in message
    assert lacking in message.split("it lacks: ")[1]
    assert cygrpc._Metadatum is changed


@offered("_Metadatum")
def test_the_probes_alone_catch_a_class_that_builds_other_entries(monkeypatch):
    shouting = a_namedtuple()
    shouting.__new__ = lambda cls, key, value: tuple.__new__(cls, (key.upper(), value))
    monkeypatch.setattr(cygrpc, "_Metadatum", shouting)
    helpers.trust_metadatum_shape(monkeypatch)  # as if unchanged
    with pytest.warns(
        fastcommon.FastcommonWarning, match=r"_Metadatum in grpc._cython.cygrpc \(it differs on a probe: _Metadatum"
    ):
        replaced = fastcommon.patch()
    fastcommon.unpatch()
    assert "_Metadatum" not in replaced and cygrpc._Metadatum is shouting


# ------------------------------------------------------------------ a Metadata grpc changed


CLASS_CHANGES = {  # (the module attributes changed, and what the gate's message then says the class lacks)
    "an OrderedDict of another kind": ({"OrderedDict": type("OrderedDict", (dict,), {})}, "an OrderedDict"),
    "attribute access of its own": ({"Metadata": helpers.metadata_stand_in(__getattr__=lambda self, name: None)},
                                    "object's attribute access"),
    "a class attribute _metadata": ({"Metadata": helpers.metadata_stand_in(_metadata=None)},
                                    "instances that hold their own _metadata"),
    "a __new__ of its own": ({"Metadata": helpers.metadata_stand_in(__new__=lambda cls, *args: object.__new__(cls))},
                             "object's __new__"),
    "another Metadata in _channel": ({}, "grpc.aio._channel's Metadata"),
}  # fmt: skip


@offered(*GRPC_METADATA_ORIGINALS)
@pytest.mark.parametrize("change", sorted(CLASS_CHANGES))
def test_a_metadata_class_grpc_changed_leaves_all_its_methods_to_grpc(monkeypatch, change):
    changed, lacking = CLASS_CHANGES[change]
    for attribute, value in changed.items():
        monkeypatch.setattr(grpc_metadata, attribute, value)
    monkeypatch.setattr(_channel, "Metadata", changed.get("Metadata", helpers.metadata_stand_in()))
    with pytest.warns(fastcommon.FastcommonWarning) as warned:
        replaced = fastcommon.patch()
    fastcommon.unpatch()
    assert len(warned) == 1 and not set(replaced) & set(GRPC_METADATA_ORIGINALS)
    message = str(warned[0].message)
    assert "Metadata class is not the one fastcommon's suite ran against (it lacks: " in message and lacking in message


@offered(*GRPC_METADATA_ORIGINALS)
def test_a_method_this_grpcio_lacks_stays_so_without_a_warning(monkeypatch):
    if "Metadata._create" in GRPC_METADATA_ORIGINALS:
        monkeypatch.delattr(grpc_metadata.Metadata, "_create")  # as in grpcio before 1.80
    with helpers.unwarned():
        replaced = fastcommon.patch()
    fastcommon.unpatch()
    assert "Metadata._create" not in replaced and "Metadata.__init__" in replaced
    assert helpers.unavailable("Metadata._create") == f"grpcio {grpc.__version__} has no Metadata._create of its own"


@offered(*GRPC_METADATA_ORIGINALS)
def test_the_probes_pass_grpcs_own_and_name_each_change_among_the_others():
    owns = {name: own for name, own in GRPC_METADATA_ORIGINALS.items() if name in PATCHED}
    assert helpers.metadata_differences(list(owns), owns) == dict.fromkeys(owns)
    for name, changed in MADE_UP_CHANGES.items():
        if name in owns:
            verdicts = helpers.metadata_differences(list(owns), {**owns, name: changed})
            assert verdicts[name] is not None and verdicts[name].startswith("it differs on a probe: "), name
            assert [other for other, why in verdicts.items() if why] == [name]


# ------------------------------------------------------------------ grpc's hooks


@contextlib.contextmanager
def get_plugin_without_the_lock():
    yield _observability._OBSERVABILITY_PLUGIN


def instrumented_get_plugin():
    """A user's wrapper of grpc's get_plugin: functools.wraps names grpc's as its __wrapped__."""
    return functools.wraps(GRPC_HOOKS["get_plugin"])(lambda: GRPC_HOOKS["get_plugin"]())


def naming_grpcs_generator():
    """A context manager calling a generator of its own, whose __wrapped__ names grpc's."""
    made = contextlib.contextmanager(get_plugin_without_the_lock.__wrapped__)
    made.__wrapped__ = GRPC_HOOKS["get_plugin"].__wrapped__
    return made


@contextlib.contextmanager
def servicer_context_never_finalized(rpc_event, state, request_deserializer):
    from grpc import _server

    yield _server._Context(rpc_event, state, request_deserializer)


HOOK_CHANGES = {
    "_create_servicer_context": lambda: servicer_context_never_finalized,
    "get_plugin": lambda: get_plugin_without_the_lock,
    "get_plugin, a user's wrapper": instrumented_get_plugin,
    "get_plugin, naming grpc's generator": naming_grpcs_generator,
    "_get_running_loop": lambda: lambda: None,
    "_is_async_handler": lambda: lambda handler: True,
}


@pytest.mark.parametrize("change", sorted(HOOK_CHANGES))
def test_a_hook_grpc_changed_stays_grpcs_with_one_warning(monkeypatch, change):
    name = change.split(",")[0]
    if name not in PATCHED:
        pytest.skip(f"grpcio {grpc.__version__} has no {name}, or this build does not offer it")
    changed = HOOK_CHANGES[change]()
    monkeypatch.setattr(*helpers.owner(name), changed)
    replaced, message = patch_expecting_one_warning()
    try:
        assert replaced == tuple(other for other in PATCHED if other != name)
        assert f"{name} in {helpers.home(name)} (its code is not one fastcommon's suite ran against)" in message
    finally:
        fastcommon.unpatch()
    assert helpers.current(name) is changed


def test_cygrpcs_compiled_hooks_are_known_release_by_release(monkeypatch):
    """Cython's functions have no source to read: on a grpcio release the suite has not run against they stay grpc's,
    and the watch prints the line to add; get_plugin, whose source is read, is known still."""
    compiled = [name for name in ("_get_running_loop", "_is_async_handler") if name in GRPC_HOOKS]
    known = {name: helpers.fingerprint(GRPC_HOOKS[name]) for name in compiled}
    monkeypatch.setattr(grpc, "__version__", "1.999.0")
    found = helpers.unknown()
    assert sorted(found) == sorted(compiled)
    for name in compiled:
        fingerprint = helpers.fingerprint(GRPC_HOOKS[name])
        assert fingerprint != known[name]
        assert found[name].startswith(f'"{fingerprint}": ("1.999.0",),  # in the fingerprints of {name} in ')


def test_on_a_cpython_newer_than_the_suite_ran_on_the_hooks_stay_grpcs_without_a_warning(monkeypatch):
    helpers.suite_ran_on_cpython_up_to(monkeypatch, (3, 9))
    with helpers.unwarned():
        replaced = fastcommon.patch()
    try:
        assert replaced == tuple(name for name in PATCHED if name not in GRPC_HOOKS)
    finally:
        fastcommon.unpatch()
    if "get_plugin" in PATCHED:
        assert (
            helpers.unavailable("get_plugin")
            == "fastcommon's does as contextlib, inspect and logging do up to CPython 3.9"
        )
