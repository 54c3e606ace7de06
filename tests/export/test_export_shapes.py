"""A request's shape (``affmon.export.shapes``): what its body depends on, and nothing else."""

from __future__ import annotations

import pytest

from affmon.export.shapes import Shape, shape_of

SERVED = frozenset({"affmon_process_threads", "affmon_export_samples_total", "affmon_thread_last_cpu"})
SORTED = ("affmon_process_threads", "affmon_thread_last_cpu")
PROMETHEUS_2 = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def get(query: str = "", accept: str | None = None, encoding: str | None = None, path: str = "/metrics") -> dict:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query}
    if accept is not None:
        environ["HTTP_ACCEPT"] = accept
    if encoding is not None:
        environ["HTTP_ACCEPT_ENCODING"] = encoding
    return environ


@pytest.mark.parametrize(
    ("environ", "shape"),
    [
        (get(), Shape(openmetrics=False, gzip=False)),
        (get(accept=PROMETHEUS_2, encoding="gzip"), Shape(openmetrics=True, gzip=True)),
        (get("flood=1&pad=" + "x" * 15_000, accept=PROMETHEUS_2 + ",x/y1", encoding="gzip"), Shape(True, True)),
        (get("x=1", accept="text/plain;q=0.17"), Shape(False, False)),
        (get(accept="application/openmetrics-text"), Shape(True, False)),  # no version: OpenMetrics
        (get(accept="application/openmetrics-text;version=0.0.1"), Shape(False, False)),  # below 1.0.0: text
        (get(accept="application/openmetrics-text;version=1.a"), Shape(False, False)),  # unreadable: text
        (get(accept="text/plain;version=1.0.0;escaping=allow-utf-8"), Shape(False, False)),
        (get(encoding="br, GZIP;q=0.1"), Shape(False, True)),
        (get(encoding="identity;q=0.3"), Shape(False, False)),
        (
            get("name[]=affmon_thread_last_cpu&name[]=affmon_process_threads"),
            Shape(False, False, SORTED),
        ),
        (
            get("name[]=affmon_process_threads&name[]=affmon_thread_last_cpu&name[]=affmon_process_threads"),
            Shape(False, False, SORTED),
        ),
        (
            get("name%5B%5D=affmon_thread_last_cpu&x=1&name[]=nothing&name[]=affmon_process_threads"),
            Shape(False, False, SORTED),
        ),
        (get("name[]=nothing"), Shape(False, False, ())),  # selects nothing: an empty body
        (get("name[]="), Shape(False, False)),  # a blank value is no filter (parse_qs drops it)
    ],
)
def test_a_request_is_reduced_to_format_gzip_and_filter(environ, shape):
    assert shape_of(environ, SERVED) == shape


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/metrics"), ("OPTIONS", "/metrics"), ("GET", "/favicon.ico"), ("GET", "/"), ("GET", "/metrics/")],
)
def test_a_request_not_for_metrics_has_no_shape(method, path):
    assert shape_of({"REQUEST_METHOD": method, "PATH_INFO": path}, SERVED) is None
