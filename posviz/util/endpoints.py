"""A Hub endpoint URL in one canonical spelling, so that it can be part of a cache key."""

from __future__ import annotations

from urllib.parse import urlsplit

#: huggingface_hub's endpoint when ``HF_ENDPOINT`` is not set.
DEFAULT_ENDPOINT = "https://huggingface.co"

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_endpoint(url: str) -> str:
    """``scheme://host[:port][/path]`` of an endpoint URL, spelled one way.

    Parameters
    ----------
    url
        An endpoint as given in ``HF_ENDPOINT`` (or huggingface_hub's default).

    Returns
    -------
    str
        Scheme and host in lower case, the port only when it is not the scheme's
        default, the path without a trailing slash. Credentials, query and
        fragment are dropped: they never select another Hub, and a password
        must not end up in a cache file. A string that is not a URL is only
        stripped of spaces and trailing slashes.

    Examples
    --------
    >>> normalize_endpoint("HTTPS://user:secret@HuggingFace.co:443/")
    'https://huggingface.co'
    >>> normalize_endpoint("http://127.0.0.1:8080/mirror/")
    'http://127.0.0.1:8080/mirror'
    """
    text = url.strip()
    parts = urlsplit(text)
    host = parts.hostname
    if not parts.scheme or not host:
        return text.rstrip("/")
    scheme = parts.scheme.lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a number: keep it as written rather than guess
        port = parts.netloc.rpartition(":")[2] or None
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


def is_default_endpoint(url: str) -> bool:
    """True if ``url`` is huggingface_hub's default endpoint (in any spelling)."""
    return normalize_endpoint(url) == DEFAULT_ENDPOINT
