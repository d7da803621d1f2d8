"""grpc.aio's Metadata methods as a grpcio that changed them would have them: what the gate must catch.

Each differs from grpc's where fastcommon takes its fast path, so that the probes alone see it too.
"""

from collections import OrderedDict

from grpc.aio import Metadata


def __init__(self, *args):  # reversed order
    self._metadata = OrderedDict()
    for md_key, md_value in reversed(args):
        self.add(md_key, md_value)


def add(self, key, value):  # keys upper-cased
    self._metadata.setdefault(key.upper() if isinstance(key, str) else key, []).append(value)


def from_tuple(cls, raw_metadata):  # None is not taken for no metadata
    return cls(*raw_metadata)


def _create(cls, raw_metadata):  # never the instance itself
    return cls() if raw_metadata is None else cls(*raw_metadata)


def __iter__(self):  # each list copied first: a value added on the way is not seen
    for key, values in self._metadata.items():
        yield from ((key, value) for value in list(values))


def __len__(self):  # keys, not values
    return len(self._metadata)


def __getitem__(self, key):  # the last value, not the first
    return self._metadata[key][-1]


def get(self, key, default=None):  # the default ignored
    try:
        return self[key]
    except KeyError:
        return None


def get_all(self, key):  # a copy, not the list itself
    return list(self._metadata.get(key, []))


def __contains__(self, key):  # upper-cased keys
    return isinstance(key, str) and key.upper() in self._metadata


def __setitem__(self, key, value):  # every value replaced
    self._metadata[key] = [value]


def _init_metadata(metadata=None, compression=None):  # no Metadata for no metadata
    return None if metadata is None else Metadata.from_tuple(tuple(metadata))


MADE_UP_CHANGES = {
    "Metadata.__init__": __init__,
    "Metadata.add": add,
    "Metadata.from_tuple": classmethod(from_tuple),
    "Metadata._create": classmethod(_create),
    "Metadata.__iter__": __iter__,
    "Metadata.__len__": __len__,
    "Metadata.__getitem__": __getitem__,
    "Metadata.get": get,
    "Metadata.get_all": get_all,
    "Metadata.__contains__": __contains__,
    "Metadata.__setitem__": __setitem__,
    "_BaseMultiCallable._init_metadata": staticmethod(_init_metadata),
}
