"""grpc._common functions as a grpcio that changed them would have them: what the patch gate must catch."""

import logging
import os
import re

from conftest import GRPC_ORACLE

SLICE_SIZE = 16 * 1024
_LOGGER = logging.getLogger("grpc._common")  # as grpc._common has them: its logger, and _transform beside


def _transform(message, transformer, exception_message):
    if transformer is None:
        return message
    try:
        return transformer(message)
    except Exception:
        _LOGGER.exception(exception_message)
        return None


def zero_copy_deserialize(serialized_message, deserializer):
    """grpc pull request 42193: a memoryview or a list of chunks becomes one bytes before the deserializer."""
    if isinstance(serialized_message, memoryview):
        serialized_message = serialized_message.tobytes()
    elif isinstance(serialized_message, list):
        serialized_message = b"".join(serialized_message)
    return _transform(serialized_message, deserializer, "Exception deserializing message!")


def delivered_in_slices(deserialize):
    """``deserialize`` as a zero-copy cygrpc calls it: a message in memoryview slices, a list when several."""

    def deserialize_slices(serialized_message, deserializer):
        if type(serialized_message) is bytes:
            view = memoryview(serialized_message)
            slices = [view[i : i + SLICE_SIZE] for i in range(0, len(view), SLICE_SIZE)]
            serialized_message = slices if len(slices) > 1 else view
        return deserialize(serialized_message, deserializer)

    return deserialize_slices


def encode_latin1(s):
    return s if isinstance(s, bytes) else s.encode("latin-1")


def decode_strict(b):
    return b.decode("utf-8") if isinstance(b, bytes) else b


def serialize_reraising(message, serializer):
    return message if serializer is None else serializer(message)


def deserialize_quietly(data, deserializer):
    try:
        return data if deserializer is None else deserializer(data)
    except Exception:
        return None


def decode_with_an_unprobed_branch(b):
    """Differs from grpc's decode only on a type that no probe passes: only the fingerprint sees it."""
    if isinstance(b, tuple):
        return "".join(b)
    return GRPC_ORACLE["decode"](b)


MADE_UP_CHANGES = {
    "encode": encode_latin1,
    "decode": decode_strict,
    "serialize": serialize_reraising,
    "deserialize": deserialize_quietly,
}


def grpcio_with_a_line_added(directory):
    """A grpc package in ``directory`` (to put first on PYTHONPATH): the installed one, linked file by file, with one
    comment line added to _common.encode, as a grpcio release that fastcommon does not know yet would have it."""
    import grpc

    installed, package = os.path.dirname(grpc.__file__), os.path.join(directory, "grpc")
    os.makedirs(package)
    for name in os.listdir(installed):
        if name not in ("_common.py", "__pycache__"):  # its own __pycache__: nothing is written into grpcio's
            os.symlink(os.path.join(installed, name), os.path.join(package, name))
    with open(os.path.join(installed, "_common.py"), encoding="utf-8") as file:
        source = file.read()
    source, added = re.subn(r"(\ndef encode\(.*\n)", r"\1    # a line fastcommon has not seen\n", source, count=1)
    assert added == 1
    with open(os.path.join(package, "_common.py"), "w", encoding="utf-8") as file:
        file.write(source)
    return str(directory)
