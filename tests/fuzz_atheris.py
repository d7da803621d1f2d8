"""Coverage-guided differential fuzzing with atheris: fast_common against the reference and grpc._common.

    python tests/fuzz_atheris.py -max_total_time=60      # libFuzzer options; -runs=N also works

Coverage guides through the Python side (the reference, grpc._common and this harness are
instrumented); the compiled module is called as a black box. Any difference raises.
"""

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    import inputs
    from helpers import outcome

    import fastcommon.common as reference
from grpc import _common as grpc_common

import fastcommon.fast_common as compiled

for name in ("encode", "decode", "serialize", "deserialize"):
    atheris.instrument_func(getattr(grpc_common, name))

WRAPPERS = (
    lambda fdp: fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 64)),
    lambda fdp: fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64)),
    lambda fdp: inputs.StrSubclass(fdp.ConsumeUnicode(16)),
    lambda fdp: inputs.StrSubclassOwnEncode(fdp.ConsumeUnicode(16)),
    lambda fdp: inputs.BytesSubclass(fdp.ConsumeBytes(16)),
    lambda fdp: inputs.BytesSubclassOwnDecode(fdp.ConsumeBytes(16)),
    lambda fdp: bytearray(fdp.ConsumeBytes(16)),
    lambda fdp: memoryview(fdp.ConsumeBytes(16)),
    lambda fdp: fdp.ConsumeInt(8),
    lambda fdp: None,
    lambda fdp: fdp.PickValueInList([inputs.DuckEncoder(), inputs.EncodeReturnsInt(), inputs.EncodeRaises()]),
)


def TestOneInput(data):
    fdp = atheris.FuzzedDataProvider(data)
    value = WRAPPERS[fdp.ConsumeIntInRange(0, len(WRAPPERS) - 1)](fdp)
    serializer = fdp.PickValueInList(list(inputs.SERIALIZERS))
    for name, args in (
        ("encode", (value,)),
        ("decode", (value,)),
        ("serialize", (value, serializer)),
        ("deserialize", (value, serializer)),
    ):
        expected = outcome(getattr(grpc_common, name), *args)
        for module in (reference, compiled):
            got = outcome(getattr(module, name), *args)
            if got != expected:
                raise AssertionError(f"{module.__name__}.{name}{args!r}: {got!r} != grpc's {expected!r}")


if __name__ == "__main__":
    import logging

    logging.getLogger("grpc._common").propagate = False  # expected failure records, by the thousand
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
