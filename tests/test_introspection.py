"""What help(), pydoc and inspect say of each replaced Metadata method, and what assigning its code or defaults does:
stock grpc against patched, each in a fresh process (docs/safety.md declares what differs)."""

import json

import conftest
import helpers
import pytest
from conftest import GRPC_METADATA_ORIGINALS, NEEDS_GRPCIO

pytest.importorskip("grpc", reason=NEEDS_GRPCIO)
pytestmark = [
    pytest.mark.skipif(conftest.abi3_build(), reason="the abi3 build puts Cython's functions in place"),
    pytest.mark.skipif(
        helpers.unavailable("Metadata.get") is not None, reason="fastcommon replaces no Metadata method here"
    ),
]

# Run as `python -c INTROSPECT patched|stock NAME...`: what each names answers, as JSON.
INTROSPECT = """
import inspect, json, pydoc, sys
import fastcommon
from fastcommon import _grpc
if sys.argv[1] == "patched":
    fastcommon.patch()
found = {}
for name in sys.argv[2:]:
    holder, attribute = _grpc.owner(name)
    method = getattr(holder, attribute)
    function = getattr(method, "__func__", method)
    closure = inspect.getclosurevars(function)
    found[name] = [
        pydoc.getdoc(method), pydoc.render_doc(method, renderer=pydoc.plaintext).splitlines()[2:],
        str(inspect.getfullargspec(method)), str(inspect.signature(method, follow_wrapped=False)),
        [sorted(closure.nonlocals), sorted(closure.globals), sorted(closure.builtins), sorted(closure.unbound)],
        repr(function).split(" at ")[0], function.__repr__() == repr(function), function.__eq__(function),
        function.__ne__(function), function.__hash__() == hash(function), inspect.isgeneratorfunction(function),
        inspect.getfile(function), function.__code__.co_name, function.__defaults__, function.__kwdefaults__,
    ]
    found[holder.__qualname__] = pydoc.render_doc(holder, renderer=pydoc.plaintext)  # help(grpc.aio.Metadata)
print(json.dumps(found, default=repr))
"""


def introspected(how, names):
    return json.loads(helpers.python("-c", INTROSPECT, how, *names, check_status=0).stdout)


def test_help_pydoc_and_inspect_answer_for_a_replaced_method_as_for_grpcs_own():
    """pydoc.getdoc and help()'s text (pydoc reads __doc__ through object.__getattribute__), getfullargspec,
    signature(follow_wrapped=False), getclosurevars, repr and the dunders called by hand, getfile, __code__ and
    __defaults__: as stock grpc's, for every replaced method."""
    names = sorted(GRPC_METADATA_ORIGINALS)
    assert introspected("patched", names) == introspected("stock", names)


ASSIGN = """
import sys, warnings
import fastcommon
from fastcommon import _grpc
warnings.simplefilter("error")
fastcommon.patch()
function = getattr(*_grpc.owner(sys.argv[1]))
function = getattr(function, "__func__", function)
for attribute in ("__defaults__", "__kwdefaults__", "__code__", "__globals__", "__closure__"):
    try:
        setattr(function, attribute, getattr(function, attribute))
    except AttributeError as error:
        print(attribute, error)
print(fastcommon.is_patched(sys.argv[1]))
"""


@pytest.mark.parametrize("name", sorted(GRPC_METADATA_ORIGINALS))
def test_assigning_a_replaced_methods_code_or_defaults_is_refused_in_one_clear_error(name):
    """grpc's would take them, but the compiled method would never read them: each is refused with AttributeError,
    the same words for every one (no RuntimeWarning, no Cython's words), and the method stays patched."""
    lines = helpers.python("-c", ASSIGN, name, check_status=0).stdout.splitlines()
    attributes = ("__defaults__", "__kwdefaults__", "__code__", "__globals__", "__closure__")
    assert [line.split(" at 0x")[0] for line in lines[:-1]] == [f"{each} <function {name}" for each in attributes]
    assert all(line.endswith(f"> is fastcommon's: unpatch() to set its {line.split()[0]}") for line in lines[:-1])
    assert lines[-1] == "True"


# Run as `python -c CYTHONS patched|stock NAME`: what the names only Cython's functions have, and the dunders called by
# hand, answer; as JSON.
CYTHONS = """
import json, sys, warnings
import fastcommon
from fastcommon import _grpc
warnings.simplefilter("error")
if sys.argv[1] == "patched":
    fastcommon.patch()
function = getattr(*_grpc.owner(sys.argv[2]))
function = getattr(function, "__func__", function)
aliases = ("func_code", "func_defaults", "func_globals", "func_closure", "func_dict", "func_doc", "func_name")
print(json.dumps([
    [hasattr(function, alias) for alias in aliases],
    function.__getattribute__("__code__") is function.__code__,
    function.__getattribute__("__globals__") is function.__globals__,
    sorted(function.__dir__()) == sorted(dir(function)),
]))
"""


@pytest.mark.parametrize("name", sorted(GRPC_METADATA_ORIGINALS))
def test_cythons_own_names_and_the_dunders_called_by_hand_answer_as_grpcs_function(name):
    """A function has no func_code, func_defaults, func_globals... (Cython's functions keep these Python 2 names, and
    the stand-in handed them on: Metadata.get.func_globals was fastcommon.fast_metadata's); f.__getattribute__(name)
    and f.__dir__() answer as getattr(f, name) and dir(f) do."""
    stock, patched = (helpers.python("-c", CYTHONS, how, name, check_status=0).stdout for how in ("stock", "patched"))
    assert json.loads(patched) == json.loads(stock)


ASSIGN_BY_ANOTHER_NAME = """
import sys, warnings
import fastcommon
from fastcommon import _grpc
warnings.simplefilter("error")
fastcommon.patch()
function = getattr(*_grpc.owner(sys.argv[1]))
function = getattr(function, "__func__", function)
for assign in (lambda: function.__setattr__("__defaults__", function.__defaults__),
               lambda: setattr(function, "func_defaults", function.__defaults__)):
    try:
        assign()
        print("taken")
    except AttributeError as error:
        print(str(error).split(">", 1)[1])
print(fastcommon.is_patched(sys.argv[1]))
"""


@pytest.mark.parametrize("name", sorted(GRPC_METADATA_ORIGINALS))
def test_assigning_grpcs_defaults_by_another_name_is_refused_as_by_its_own(name):
    """f.__setattr__('__defaults__', ...) and f.func_defaults = ... reached the compiled function's setter, which warns
    (RuntimeWarning: changes to cyfunction.__defaults__ will not currently affect ...) and, with warnings as errors,
    raised SystemError (the warning's return unchecked); each is refused as f.__defaults__ = ... is."""
    lines = helpers.python("-c", ASSIGN_BY_ANOTHER_NAME, name, check_status=0).stdout.splitlines()
    assert lines == [" is fastcommon's: unpatch() to set its __defaults__",
                     " is fastcommon's: unpatch() to set its func_defaults", "True"]  # fmt: skip
