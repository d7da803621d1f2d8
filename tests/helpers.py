"""What the tests compare: everything observable about one call."""

import contextlib
import logging

GRPC_LOGGER = logging.getLogger("grpc._common")


class _RecordCapture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        self.records.append((record.name, record.levelno, record.getMessage(), type(exc), str(exc)))


@contextlib.contextmanager
def captured_grpc_records():
    """Yield a list that receives (name, level, message, exception type, exception text) of each grpc._common record."""
    capture = _RecordCapture()
    GRPC_LOGGER.addHandler(capture)
    try:
        yield capture.records
    finally:
        GRPC_LOGGER.removeHandler(capture)


def _which_argument(result, args):
    return next((i for i, arg in enumerate(args) if result is arg), None)


def outcome(function, *args):
    """The call's result (type, value, which argument it is) or exception (type, message), and its log records."""
    with captured_grpc_records() as records:
        try:
            result = function(*args)
        except BaseException as exc:  # KeyboardInterrupt from a serializer must propagate the same way
            observed = ("raised", type(exc), str(exc))
        else:
            observed = ("returned", type(result), result, _which_argument(result, args))
    return (*observed, records)
