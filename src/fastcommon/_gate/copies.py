"""What the gate probes in place of grpc's objects: copies of functions and classes, so that probing changes nothing."""

import types
from typing import Any

# Left out of a class's copy: what only its own layout or hierarchy has, and what runs when it is subclassed.
_NOT_COPIED = {"__dict__", "__weakref__", "__slots__", "_abc_impl", "__abstractmethods__", "__init_subclass__"}


def copied(function: Any, **names: Any) -> Any:
    """grpc's ``function`` (or classmethod, staticmethod) and its module's functions it calls, copied, ``names`` set."""
    if isinstance(function, (classmethod, staticmethod)):
        return type(function)(copied(function.__func__, **names))
    if not isinstance(function, types.FunctionType):
        return function
    namespace = dict(function.__globals__, **names)

    def copy(grpcs: types.FunctionType) -> types.FunctionType:
        twin = types.FunctionType(grpcs.__code__, namespace, grpcs.__name__, grpcs.__defaults__, grpcs.__closure__)
        twin.__kwdefaults__ = grpcs.__kwdefaults__
        return twin

    pending = [function]
    while pending:
        for name in pending.pop().__code__.co_names:
            value = namespace.get(name)
            if isinstance(value, types.FunctionType) and value.__globals__ is function.__globals__:
                namespace[name] = copy(value)
                pending.append(value)
    return copy(function)


def detached(cls: Any, base: type) -> Any:
    """``cls`` copied onto ``base`` (object or tuple), each attribute set alone: no __set_name__ runs."""
    probe = type(cls.__name__, (base,), {"__slots__": ()} if base is tuple else {})
    for klass in reversed(cls.__mro__[: cls.__mro__.index(base)]):
        for key, value in vars(klass).items():
            if key not in _NOT_COPIED:
                setattr(probe, key, value)
    return probe
