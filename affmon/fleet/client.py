"""A small client of the Prometheus HTTP API (``/api/v1/query``, ``/api/v1/query_range``),
on the standard library (urllib, json): affmon fleet reads nothing else and never contacts
the nodes.

Every failure becomes one ``PrometheusError`` whose message is one line that says what
happened and where: unreachable (refused, no route, a name that does not resolve),
timed out, an HTTP error (with Prometheus's own ``error`` when its body has one), or an
answer that is not the API's JSON. A request is POSTed form-encoded (as Grafana does), so a
long query never meets a URL length limit. ``queries`` and ``seconds`` count what the
client asked and how long it waited, so the cost of a refresh can be measured.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from affmon.core.errors import AffmonError

DEFAULT_TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 256 << 20  # a fleet's answers are a few MB; a runaway body is refused


class PrometheusError(AffmonError):
    """One line: what failed, and where."""


class Unreachable(PrometheusError):
    pass


class TimedOut(PrometheusError):
    pass


class HttpError(PrometheusError):
    pass


class BadAnswer(PrometheusError):
    pass


def base_url(text: str) -> str:
    """``text`` as the base URL of a Prometheus server (``http://host:9090``, or a path prefix
    it is served under: ``https://host/prometheus``), without a trailing slash. Refuses what
    is not an http(s) URL with a host, in one line."""
    parts = urllib.parse.urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PrometheusError(f"not a Prometheus URL (http://HOST:PORT): {text!r}")
    try:
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise PrometheusError(f"not a port number in {text!r}") from None
    if parts.query or parts.fragment:
        raise PrometheusError(f"a Prometheus URL has no query or fragment: {text!r}")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _reason(exc: BaseException) -> str:
    """The innermost cause in a few words: "Connection refused", "Name or service not known"."""
    reason: Any = getattr(exc, "reason", exc)
    if isinstance(reason, BaseException):
        return getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    return str(reason)


class PrometheusClient:
    """Instant and range queries against one Prometheus, each within ``timeout_s``."""

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.base = base_url(url)
        self.timeout_s = timeout_s
        self.queries = 0  # requests sent
        self.seconds = 0.0  # wall time waiting for them

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's vector (``at``: Unix time; None: now on the server)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._result("/api/v1/query", params, "vector")

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        """A range query's matrix: each series with its ``values`` [[t, "v"], ...]."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"}
        return self._result("/api/v1/query_range", params, "matrix")

    def _result(self, path: str, params: dict[str, str], kind: str) -> list[dict[str, Any]]:
        answer = self._post(path, params)
        data = answer.get("data") if isinstance(answer, dict) else None
        if answer.get("status") != "success" or not isinstance(data, dict):
            error = answer.get("error") if isinstance(answer, dict) else None
            raise BadAnswer(f"Prometheus at {self.base} refused the query: {error or 'no data in its answer'}")
        if data.get("resultType") != kind or not isinstance(data.get("result"), list):
            raise BadAnswer(f"Prometheus at {self.base} answered a {data.get('resultType')!r}, not a {kind}")
        result: list[dict[str, Any]] = data["result"]
        return result

    def _post(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.base + path,
            data=urllib.parse.urlencode(params).encode(),
            headers={"Accept": "application/json", "User-Agent": "affmon-fleet"},
            method="POST",
        )
        self.queries += 1
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise HttpError(self._http_error(exc)) from None
        except TimeoutError:
            raise TimedOut(f"Prometheus at {self.base} did not answer within {self.timeout_s:g} s") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError | socket.timeout):
                raise TimedOut(f"Prometheus at {self.base} did not answer within {self.timeout_s:g} s") from None
            raise Unreachable(f"Prometheus at {self.base} is unreachable: {_reason(exc)}") from None
        except (OSError, http.client.HTTPException) as exc:
            raise Unreachable(f"Prometheus at {self.base} is unreachable: {_reason(exc)}") from None
        finally:
            self.seconds += time.monotonic() - started
        if len(body) > MAX_ANSWER_BYTES:
            raise BadAnswer(f"Prometheus at {self.base} sent more than {MAX_ANSWER_BYTES >> 20} MiB")
        try:
            answer = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise BadAnswer(f"Prometheus at {self.base} did not answer JSON (is it Prometheus?)") from None
        if not isinstance(answer, dict):
            raise BadAnswer(f"Prometheus at {self.base} did not answer the API's JSON")
        return answer

    def _http_error(self, exc: urllib.error.HTTPError) -> str:
        """ "HTTP 400 from Prometheus at URL: parse error: ..." (its JSON ``error`` when it sent one)."""
        detail = exc.reason
        try:
            body = json.loads(exc.read(65536))
            if isinstance(body, dict) and isinstance(body.get("error"), str):
                detail = body["error"]
        except (ValueError, OSError, UnicodeDecodeError):
            pass
        finally:
            exc.close()
        return f"HTTP {exc.code} from Prometheus at {self.base}: {' '.join(str(detail).split())}"
