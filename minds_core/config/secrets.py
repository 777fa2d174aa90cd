"""Secrets in the configuration: which keys hold them, and their values kept out of files, logs and messages.

A key holds a secret by its name (``api_key``, ``token``, ``password``, ...;
``*_env`` keys name variables and are not secrets), whatever its value's type.
Saved configs write ``***`` instead (``redact``); reading one back forgets
those values (``without_redacted``), so they come from the environment again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: Key names whose string values are secrets (``*_env`` keys name variables and are not).
_SECRET_KEY = re.compile(
    r"(api_?key|secret|passw(or)?d|credentials?|authorization|private_key|access_key|(^|_)(auth_|access_|api_)?token)$"
    r"|secrets?$",
    re.IGNORECASE,
)
#: Token-named settings that are not secrets (special tokens, counts).
_NOT_SECRET = re.compile(r"(^|_)(stop|eos|bos|pad|unk|sep|cls|mask|special|max|num)_tokens?$", re.IGNORECASE)
REDACTED = "***"
#: What an error message shows instead of a secret-named key's value.
HIDDEN = "value not shown: the key holds a secret"
#: Secret-named keys whose lists hold names of variables (``secrets = ["OPENAI_API_KEY"]``), not values.
_NAMES_LIST = re.compile(r"(^|_)secrets?$", re.IGNORECASE)


def shown_value(key: str, value: Any) -> str:
    """``repr(value)`` for messages, or a placeholder when ``key`` holds a secret."""
    return HIDDEN if is_secret_key(key) else repr(value)

def redact(value: Any) -> Any:
    """A copy with secret values (api keys, tokens, secrets; strings, numbers, anything) replaced by ***."""
    if isinstance(value, Mapping):
        return {k: (_redact_all(v, str(k)) if is_secret_key(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value

def is_secret_key(key: str) -> bool:
    """Whether a config key holds a secret (its values are never shown or written, whatever their type)."""
    return bool(_SECRET_KEY.search(key)) and not _NOT_SECRET.search(key) and not key.lower().endswith("_env")

def without_redacted(value: Any, path: str, dropped: list[str]) -> Any:
    """``value`` without entries written as ***; their dotted paths go to ``dropped``."""
    if not isinstance(value, Mapping):
        return value
    kept = {}
    for key, item in value.items():
        if item == REDACTED:
            dropped.append(f"{path}{key}")
        else:
            kept[key] = without_redacted(item, f"{path}{key}.", dropped)
    return kept

def _redact_all(value: Any, key: str) -> Any:
    """Values under the secret-named ``key``, all replaced by ***.

    Kept: unset values (None, ""), switches (booleans), and a ``secrets`` list, which
    names variables and holds no values.
    """
    if isinstance(value, Mapping):
        return {k: _redact_all(v, key) for k, v in value.items()}
    if isinstance(value, list):
        names = _NAMES_LIST.search(key) and all(isinstance(v, str) for v in value)
        return value if names else [_redact_all(v, key) for v in value]
    if value is None or value == "" or isinstance(value, bool):
        return value
    return REDACTED
