"""The pure-Python spec of grpc._common's four functions, and the fallback: each as its namesake in grpc/_common.py (the
twin fast_common.pyx matches it, no better); positional-only, as grpc calls them and the twin's builtins require."""

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, AnyStr

PROBING = threading.local()  # .recorder: what the patch gate logs on instead, in the thread that probes


def logger() -> Any:
    """The logger a failing (de)serializer is logged on (both twins ask here): grpc's, but where the gate probes."""
    return getattr(PROBING, "recorder", None) or grpcs_logger()


def grpcs_logger() -> logging.Logger:
    """grpc._common's _LOGGER at the call; before grpc's import, the logger it will take, asked for only now (so that a
    logging configuration made before grpc's import treats it as grpc's)."""
    grpc_common = sys.modules.get("grpc._common")
    return logging.getLogger("grpc._common") if grpc_common is None else grpc_common._LOGGER


def encode(s: AnyStr, /) -> bytes:
    """Return bytes as they are; encode anything else with its ``encode("utf8")``."""
    return s if isinstance(s, bytes) else s.encode("utf8")


def decode(b: AnyStr, /) -> str:
    """Decode bytes as UTF-8, replacing invalid sequences; return anything else as it is."""
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else b


def _transform(message: Any, transformer: Callable[[Any], Any] | None, exception_message: str) -> Any:
    if transformer is None:
        return message
    try:
        return transformer(message)
    except Exception:
        logger().exception(exception_message)
        return None


def serialize(message: Any, serializer: Callable[[Any], bytes] | None, /) -> Any:
    """Apply ``serializer`` to ``message``; on an Exception log it on ``grpc._common`` and return None."""
    return _transform(message, serializer, "Exception serializing message!")


def deserialize(serialized_message: bytes, deserializer: Callable[[bytes], Any] | None, /) -> Any:
    """Apply ``deserializer`` to the bytes; on an Exception log it on ``grpc._common`` and return None."""
    return _transform(serialized_message, deserializer, "Exception deserializing message!")
