"""Secrets in the configuration: which keys hold them, and their values kept out of files, logs and messages.

A key holds a secret by its name, read as words whatever its spelling
(``api_key``, ``X-Api-Key``, ``clientSecret``, ``DB_PASSWORD``, ``session``, ``jwt``,
``service_account``, ...; a last word that says how it is written, as in ``credentials_json`` or
``private_key_pem``, is read past; ``*_env`` keys name variables and are not secrets), whatever its
value's type. Besides secret-named keys, a URL's ``user:password@`` and its
secret-named query parameters, and the ``value`` of a ``{name, value}`` pair
whose name is secret (headers given as a list) are secrets too.

Saved configs write ``***`` instead (``redact``); a secret written as a
reference to a variable (``"$NAME"``, ``"${NAME}"``, ``"${NAME:-}"``) is a name,
not a value, and is saved as it is. Reading a saved config back forgets the
``***`` values, in tables and in lists of tables alike (``without_redacted``),
so they come from the environment (or ``--set``) again, never from the copy.
``secret_values`` lists the values themselves (with those of the environment
variables the config names), which ``masking`` then masks in
everything a run writes or prints.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "***"
#: What an error message shows instead of a secret-named key's value.
HIDDEN = "value not shown: the key holds a secret"

#: A key whose last word is one of these holds a secret.
_SECRET_WORDS = frozenset(
    {
        "secret", "secrets", "password", "passwd", "pwd", "pass", "passphrase", "credential", "credentials",
        "auth", "authorization", "bearer", "cookie", "cookies", "session", "sessionid", "dsn",
        "apikey", "secretkey", "privatekey", "accesskey", "signingkey", "token", "apitoken", "accesstoken",
        "jwt", "jwk", "keyfile", "apisecret", "otp", "totp", "authtoken", "creds", "webhook",
    }
)  # fmt: skip
#: Secrets named by their last two words (Google's ``service_account`` JSON, Azure's ``connection_string``, a Slack
#: ``webhook_url`` that anyone holding it can post to, a GitHub personal access token ``github_pat``).
_SECRET_PHRASES = frozenset(
    {("service", "account"), ("connection", "string"), ("client", "assertion"), ("webhook", "url"),
     ("github", "pat"), ("gh", "pat"), ("gitlab", "pat")}
)  # fmt: skip
#: Words that say how a secret is written, not what it is: ``credentials_json``, ``private_key_pem``,
#: ``service_account_info``, ``api_key_b64`` hold the secret the words before name (``*_file``/``*_path`` name
#: where it is, and are not secrets).
_ENCODING_WORDS = frozenset(
    {"json", "yaml", "yml", "toml", "b64", "base64", "pem", "der", "hex", "info", "raw", "value", "text", "str",
     "string", "contents", "content", "data", "blob", "bytes"}
)  # fmt: skip
#: ``*_key`` holds a secret when the word before ``key`` says what kind of key it is.
_KEY_KINDS = frozenset(
    {
        "api", "access", "secret", "private", "signing", "encryption", "client", "auth", "ssh", "license",
        "session", "master", "app", "account", "service", "subscription", "admin", "hmac", "webhook", "deploy",
        # services whose keys are API keys (``AZURE_OPENAI_KEY``, ``wandb_key``, a judge's ``openai_key``)
        "openai", "anthropic", "azure", "wandb", "stripe", "storage", "firebase", "gemini", "cohere", "mistral",
        "groq", "tinker",
    }
)  # fmt: skip
#: ``*_token`` settings that are not secrets: special tokens of a tokenizer, counts.
_TOKEN_KINDS = frozenset({"stop", "eos", "bos", "pad", "unk", "sep", "cls", "mask", "special", "max", "num", "start", "end"})
#: Plurals that name lists of secrets (``api_keys``, ``passwords``) and are read as their singular.
_PLURALS = frozenset(
    word + "s"
    for word in ("key", "password", "passwd", "passphrase", "credential", "cookie", "dsn", "apikey", "secretkey",
                 "privatekey", "accesskey", "signingkey", "apitoken", "accesstoken")
)  # fmt: skip
#: Secret-named keys whose lists hold names of variables (``secrets = ["OPENAI_API_KEY"]``), not values.
_NAMES_LISTS = frozenset({"secret", "secrets"})
#: Variables of the shell whose names read as secrets but are not (the working directory, the desktop).
_SHELL_VARIABLES = frozenset({"PWD", "OLDPWD", "DESKTOP_SESSION"})
#: Keys of a ``{name, value}`` pair (a header list): the key naming it, and the one holding its value.
_PAIR_NAMES, _PAIR_VALUE = ("name", "key", "header"), "value"

#: ``scheme://user:password@host``: the password part.
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)(?P<password>[^/\s@]+)(?=@)", re.IGNORECASE)
#: ``?name=value`` / ``&name=value`` in a URL: a query parameter.
_QUERY_PARAMETER = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z0-9_.-]+)=)(?P<value>[^&#\s]*)")
#: A secret given as a reference to a variable: ``$NAME``, ``${NAME}``, or ``${NAME:-}`` (none when it is unset).
_VARIABLE_REFERENCE = re.compile(r"\$(?P<brace>\{)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?(brace)(?::-)?\})")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def key_words(key: str) -> list[str]:
    """A key's words, lower case: ``X-Api-Key`` -> x, api, key; ``clientSecret`` -> client, secret."""
    return [word for word in re.split(r"[^a-z0-9]+", _CAMEL.sub("_", str(key)).lower()) if word]


def is_secret_key(key: str) -> bool:
    """Whether a config key holds a secret (its values are never shown or written, whatever their type)."""
    words = key_words(key)
    while len(words) > 1 and words[-1] in _ENCODING_WORDS and tuple(words[-2:]) not in _SECRET_PHRASES:
        words = words[:-1]  # "credentials_json" is the credentials, written as JSON
    if not words or words[-1] == "env":
        return False
    if tuple(words[-2:]) in _SECRET_PHRASES:
        return True
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if last == "tokens":  # counts and lists of special tokens, unless the word before names a kind of secret
        return before in _KEY_KINDS
    if last in _PLURALS:
        last = last[:-1]
    if last == "token":
        return before not in _TOKEN_KINDS
    if last == "key":
        return before in _KEY_KINDS
    if last == "id":
        return before == "session"
    return last in _SECRET_WORDS


def shown_value(key: str, value: Any) -> str:
    """``repr(value)`` for messages, or a placeholder when ``key`` holds a secret."""
    return HIDDEN if is_secret_key(key) else repr(redact(value))


def redact(value: Any) -> Any:
    """A copy with secret values (api keys, tokens, passwords in URLs, ...; strings, numbers, anything) replaced by ***."""
    if isinstance(value, Mapping):
        secret_pair = _is_secret_pair(value)
        return {
            k: (_redact_all(v, str(k)) if is_secret_key(str(k)) or (secret_pair and k == _PAIR_VALUE) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def secret_values(value: Any, environ: Mapping[str, str] | None = None) -> set[str]:
    """Every secret value ``redact`` hides in ``value``, as text, with the values of the variables it names.

    Variables are named by ``*_env`` keys (``api_key_env = "MY_KEY"``), by lists of
    names under ``secrets`` and by secret values written ``$NAME``; every secret-named
    variable of ``environ`` (default: this process's) counts too (``TINKER_API_KEY``, ``HF_TOKEN``, ...).
    """
    environ = os.environ if environ is None else environ
    found: set[str] = {text for name, text in environ.items() if name not in _SHELL_VARIABLES and is_secret_key(name)}
    _collect(value, "", False, environ, found)
    return {text for text in found if text}


def _collect(value: Any, key: str, secret: bool, environ: Mapping[str, str], found: set[str]) -> None:
    if isinstance(value, Mapping):
        secret_pair = _is_secret_pair(value)
        for k, item in value.items():
            inner = secret or is_secret_key(str(k)) or (secret_pair and k == _PAIR_VALUE)
            _collect(item, str(k), inner, environ, found)
    elif isinstance(value, list):
        names = secret and _names_list(key, value)
        for item in value:
            if names:
                found.add(environ.get(item, ""))
            else:
                _collect(item, key, secret, environ, found)
    elif isinstance(value, str):
        if _names_secret_variable(key):
            found.add(environ.get(value, ""))
        elif secret and (reference := _VARIABLE_REFERENCE.fullmatch(value)):
            found.add(environ.get(reference["name"], ""))  # "$JUDGE_KEY": the variable's value is the secret
        elif secret:
            found.add(value)
            found.update(value.split()[1:])  # "Bearer sk-...": the credential alone, as a program may print it
        else:
            found.update(m["password"] for m in _URL_PASSWORD.finditer(value))
            found.update(m["value"] for m in _QUERY_PARAMETER.finditer(value) if is_secret_key(m["name"]))
    elif secret and value is not None and not isinstance(value, bool):
        found.add(str(value))


def without_redacted(value: Any, path: str, dropped: list[str]) -> Any:
    """``value`` without what a saved config holds as *** (at any depth, lists of tables included): values
    written ***, lists holding them, and texts whose URL password or secret query parameter is ***.

    Their keys, as ``--set`` names them (``envs[0].args.api_key``, below ``path``), go to ``dropped``.
    """
    if isinstance(value, list):
        return [without_redacted(item, f"{path}[{index}]", dropped) for index, item in enumerate(value)]
    if not isinstance(value, Mapping):
        return value
    kept = {}
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if item == REDACTED or (isinstance(item, list) and REDACTED in item) or partly_redacted(item):
            dropped.append(where)
        else:
            kept[key] = without_redacted(item, where, dropped)
    return kept


def partly_redacted(value: Any) -> bool:
    """Whether ``value`` is a URL whose password or secret query parameter was saved as ***."""
    return isinstance(value, str) and (
        any(m["password"] == REDACTED for m in _URL_PASSWORD.finditer(value))
        or any(m["value"] == REDACTED and is_secret_key(m["name"]) for m in _QUERY_PARAMETER.finditer(value))
    )


def redact_text(text: str) -> str:
    """``text`` with a URL's password and its secret-named query parameters replaced by ***."""
    text = _URL_PASSWORD.sub(lambda m: m["head"] + REDACTED, text)
    return _QUERY_PARAMETER.sub(lambda m: m["head"] + (REDACTED if is_secret_key(m["name"]) and m["value"] else m["value"]), text)


def _is_secret_pair(mapping: Mapping[Any, Any]) -> bool:
    """Whether ``mapping`` is a ``{name: "Authorization", value: ...}`` pair whose name is secret."""
    return _PAIR_VALUE in mapping and any(isinstance(mapping.get(k), str) and is_secret_key(mapping[k]) for k in _PAIR_NAMES)


def _names_list(key: str, value: Iterable[Any]) -> bool:
    """Whether ``value`` under ``key`` is a ``secrets`` list of variable names."""
    words = key_words(key)
    return bool(words) and words[-1] in _NAMES_LISTS and all(isinstance(v, str) for v in value)


def _names_secret_variable(key: str) -> bool:
    """Whether ``key`` names the variable holding a secret (``api_key_env``, ``HF_TOKEN_ENV``)."""
    words = key_words(key)
    return len(words) > 1 and words[-1] == "env" and is_secret_key("_".join(words[:-1]))


def _redact_all(value: Any, key: str) -> Any:
    """Values under the secret-named ``key``, all replaced by ***.

    Kept: unset values (None, ""), switches (booleans), references to variables
    (``"$NAME"``), and a ``secrets`` list, which names variables and holds no values.
    """
    if isinstance(value, Mapping):
        return {k: _redact_all(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return value if _names_list(key, value) else [_redact_all(v, key) for v in value]
    if value is None or value == "" or isinstance(value, bool) or is_reference(value):
        return value
    return REDACTED


def is_reference(value: Any) -> bool:
    """Whether ``value`` names the variable holding a secret (``"$NAME"``, ``"${NAME}"``, ``"${NAME:-}"``): no secret itself."""
    return isinstance(value, str) and _VARIABLE_REFERENCE.fullmatch(value) is not None
