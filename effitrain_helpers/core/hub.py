"""Can this process use the Hugging Face Hub? (every loader that prefers a real model or dataset)

One home for the network question: whether the user asked for no network, whether the Hub answers, and where the
Hugging Face cache lives. Models, processors, data and the offline kit all ask here.

"Answers" means a real HTTP request, not an open connection: ``GET {HF_ENDPOINT}/api/models?limit=1`` through
huggingface_hub's own session (so its proxies and certificates apply), with a connect and a read time limit,
must return a 2xx JSON list. A proxy or firewall that accepts the connection and never replies, a captive
portal, an HTTP error or a non-Hub page all count as "not usable", and the lessons fall back to their offline
path within a few seconds. The answer is asked once per process and endpoint.

Once the Hub is found usable, every later request of huggingface_hub that names no time limit of its own gets
one too (its shared client has none by default), so a Hub that stops answering mid-download fails instead of
waiting forever.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from effitrain_helpers.core.language import tr

HUB_TIMEOUT_S = 3.0  # connect and read limit of the question "does the Hub answer?"
REQUEST_TIMEOUT_S = 30.0  # read limit of huggingface_hub's requests that set none (connect: HUB_TIMEOUT_S)
DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "on", "yes", "true"}
_ANSWERS: dict[str, str | None] = {}  # endpoint -> None (usable) or why not, asked once per process
_LOCK = threading.Lock()


def hub_offline_requested() -> bool:
    """True when the user asked for no network (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_endpoint() -> str:
    """The Hub's address: ``HF_ENDPOINT``, else https://huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _ask(endpoint: str, timeout: float) -> str | None:
    """One request to the Hub's model list: None when it answers like the Hub, else why not (one phrase)."""
    from huggingface_hub.utils import get_session

    try:
        response = get_session().get(f"{endpoint}/api/models", params={"limit": 1}, timeout=timeout)
    except Exception as err:  # noqa: BLE001 - any failure of the request means "not usable"
        if "timeout" in type(err).__name__.lower():
            return _no_answer(endpoint, timeout)
        return tr("the Hub ({endpoint}) cannot be reached ({error})", endpoint=endpoint, error=type(err).__name__)
    if not 200 <= response.status_code < 300:
        return tr("the Hub ({endpoint}) answered HTTP {status}", endpoint=endpoint, status=response.status_code)
    try:
        if isinstance(response.json(), list):
            return None
    except ValueError:
        pass
    return tr("the Hub ({endpoint}) answered with a page that is not the Hub's (a captive portal?)", endpoint=endpoint)


def _no_answer(endpoint: str, timeout: float) -> str:
    return tr("the Hub ({endpoint}) did not answer within {timeout:g} s", endpoint=endpoint, timeout=timeout)


def hub_problem(timeout: float = HUB_TIMEOUT_S) -> str | None:
    """None when the Hub is usable now, else one phrase saying why not (for the lessons' one-line reasons).

    Asked once per process and endpoint; the request runs in a daemon thread, so even a DNS lookup that
    hangs (which no socket time limit covers) cannot keep the caller waiting much longer than ``2 * timeout``.
    """
    if hub_offline_requested():
        return tr("HF_HUB_OFFLINE is set")
    endpoint = hub_endpoint()
    with _LOCK:
        if endpoint not in _ANSWERS:
            answer = [_no_answer(endpoint, timeout)]

            def probe() -> None:
                answer[0] = _ask(endpoint, timeout)

            thread = threading.Thread(target=probe, daemon=True)
            thread.start()
            thread.join(2 * timeout)
            _ANSWERS[endpoint] = answer[0]  # still the default "did not answer" if the request hangs
            if _ANSWERS[endpoint] is None:
                _bound_hub_requests()
        return _ANSWERS[endpoint]


def hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """Whether the Hugging Face Hub answers like the Hub within ``timeout`` seconds (see :func:`hub_problem`)."""
    return hub_problem(timeout) is None


def _bound_hub_requests() -> None:
    """Give huggingface_hub's shared client a connect and a read time limit (it has none by default).

    Requests that pass their own (the downloads: ``HF_HUB_ETAG_TIMEOUT``, ``HF_HUB_DOWNLOAD_TIMEOUT``, 10 s
    each by default) keep theirs. A client factory the user installed is left alone.
    """
    from huggingface_hub.utils import _http, set_client_factory

    if getattr(_http, "_GLOBAL_CLIENT_FACTORY", None) is not _http.default_client_factory:
        return

    def bounded_client():
        client = _http.default_client_factory()
        timeout_class = type(client.timeout)  # httpx.Timeout or httpx2.Timeout, by huggingface_hub's version
        client.timeout = timeout_class(REQUEST_TIMEOUT_S, connect=HUB_TIMEOUT_S)
        return client

    set_client_factory(bounded_client)


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home).expanduser() / "hub"
