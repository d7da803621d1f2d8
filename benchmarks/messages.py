"""--messages: protobuf messages of three sizes, (de)serialized bare and through grpc's and fastcommon's wrappers."""

import importlib

from benchmarks.timing import calls, format_table, ns_cells, ratio_range

WAYS = ("bare", "grpc._common", "fastcommon")


def sample_messages(echo):
    """(label, message): about 20 bytes; about 1 KiB of a repeated field; about 64 KiB of a bytes field."""
    return [
        ("small: text, count", echo(text="hello, fastcommon", count=7)),
        ("1 KiB: repeated int64", echo(text="numbers", numbers=[(i * 2654435761) % 2**40 for i in range(170)])),
        ("64 KiB: bytes", echo(text="payload", payload=bytes(range(256)) * 256)),
    ]


def timings(echo):
    """What --messages times, every (direction, message, way), as (name, pyperf time function, its arguments)."""
    wrappers = {
        "grpc._common": importlib.import_module("grpc._common"),
        "fastcommon": importlib.import_module("fastcommon"),
    }
    timed = []
    for label, message in sample_messages(echo):
        data = message.SerializeToString()
        for direction, function_name, payload, transformer in (
            ("serialize", "serialize", message, echo.SerializeToString),
            ("deserialize", "deserialize", data, echo.FromString),
        ):
            name = f"{direction} {label}"
            timed.append((f"{name} | bare", *calls(transformer, payload)))
            for way, module in wrappers.items():
                timed.append((f"{name} | {way}", *calls(getattr(module, function_name), payload, transformer)))
    return timed


def share_cell(through, bare):
    """The wrapper's share of the time through it, (through - bare) / through; "within noise" where the range
    the two intervals allow holds no difference. Each a (mean ns, half-width of its 95% interval)."""
    ratio, low, high = ratio_range(bare, through)
    return "within noise" if low <= 1.0 <= high else f"{1 - ratio:.1%}"


def report(timed, echo, noise):
    """The table of this run ({name: (mean ns, half-width)}) and its noise line, then the published figures."""
    from google.protobuf.internal import api_implementation

    rows = [("message, size", "way", "ns/message", "95% CI", "MB/s", "wrapper's share")]
    for label, message in sample_messages(echo):
        size = message.ByteSize()
        for direction in ("serialize", "deserialize"):
            bare = timed[f"{direction} {label} | bare"]
            for n, way in enumerate(WAYS):
                value = timed[f"{direction} {label} | {way}"]
                share = "" if way == "bare" else share_cell(value, bare)
                rows.append(
                    ("" if n else f"{direction} {label}, {size:,} B", way, *ns_cells(value),
                     f"{size / value[0] * 1e3:,.1f}", share)
                )  # fmt: skip
    return "\n".join(
        [
            f"protobuf {api_implementation.Type()} backend; MB/s = message bytes / time; the wrapper's share = "
            "(through the wrapper - bare) / through the wrapper",
            format_table(rows, text_columns=2),
            noise,
            "",
            PUBLISHED_NOTE,
            format_table([("dataset", *PUBLISHED_COLUMNS)] + [(name, *figures) for name, figures in PUBLISHED.items()]),
        ]
    )


PUBLISHED_NOTE = (
    "Published figures, not measured here: the protobuf team's Python throughput, from their page \"Protobuf "
    'Performance"\n(docs/performance.md in github.com/protocolbuffers/protobuf, where its benchmarks/README.md '
    "points). Another machine\n(Intel Xeon E5-2630, 32 GB), an older protobuf with other backends (C++gen: "
    "C++-generated code; C++refl: C++ reflection;\npure: pure Python) and other messages: for scale only, not for "
    "comparison row by row."
)
PUBLISHED_COLUMNS = (  # Python with protobuf's C++-generated code, with its C++ reflection, and pure Python
    "parse C++gen",
    "parse C++refl",
    "parse pure",
    "serialize C++gen",
    "serialize C++refl",
    "serialize pure",
)
PUBLISHED = {
    "google_message1_proto2": (
        "82.8314MB/s",
        "47.6763MB/s",
        "3.76299MB/s",
        "260.911MB/s",
        "58.4815MB/s",
        "5.77824MB/s",
    ),
    "google_message1_proto3": ("82.0498MB/s", "39.9467MB/s", "3.77751MB/s", "239.4MB/s", "33.6336MB/s", "5.80524MB/s"),
    "google_message2": ("241.46MB/s", "71.5723MB/s", "2.73538MB/s", "996.755MB/s", "57.9601MB/s", "4.09246MB/s"),
    "google_message3_1": ("209.036MB/s", "142.356MB/s", "15.3324MB/s", "1.48625GB/s", "421.287MB/s", "18.002MB/s"),
    "google_message3_2": ("573.835MB/s", "314.33MB/s", "15.0169MB/s", "2.39597GB/s", "326.777MB/s", "16.0527MB/s"),
    "google_message3_3": ("32.248MB/s", "26.1431MB/s", "2.63541MB/s", "123.978MB/s", "35.893MB/s", "2.32834MB/s"),
    "google_message3_4": ("2.49631GB/s", "2.35442GB/s", "802.061MB/s", "5.9241GB/s", "4.05837GB/s", "876.87MB/s"),
    "google_message3_5": ("10.3962MB/s", "8.84659MB/s", "1.25203MB/s", "37.0285MB/s", "12.2228MB/s", "1.1979MB/s"),
    "google_message4": ("305.543MB/s", "174.834MB/s", "7.86485MB/s", "1.49623GB/s", "205.116MB/s", "8.93428MB/s"),
}
