"""age encryption of exported weights (``save_weights_external(age_encryption_recipients=...)``).

As on the hosted service, each exported file is written as ``<name>.age``, encrypted to every
recipient (an X25519 ``age1...`` key or an SSH public key), and no plaintext copy is kept. The
encryption is the ``pyrage`` package's (the age reference format, which tinker-cookbook and the
``age`` tool decrypt); it comes with the ``local`` extra (``minds-core[local]``, also ``[cookbook]``), imported only
when a recipient is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..model.errors import LocalBadRequestError

__all__ = ["SUFFIX", "encrypt_files", "parse_recipients"]

#: What an encrypted file's name ends with.
SUFFIX = ".age"


def parse_recipients(recipients: Sequence[str]) -> list[Any]:
    """The recipients as pyrage keys; a 400 naming the one that is not an age or SSH public key."""
    try:
        import pyrage
    except ImportError:
        raise LocalBadRequestError(
            "age_encryption_recipients needs the pyrage package on the machine that saves the weights: "
            "pip install -c constraints.txt 'minds-core[local]' (or pyrage alone), or leave age_encryption_recipients unset"
        ) from None
    keys = []
    for position, recipient in enumerate(recipients):
        text = recipient.strip() if isinstance(recipient, str) else ""
        kind = pyrage.ssh if text.startswith("ssh-") else pyrage.x25519
        try:
            keys.append(kind.Recipient.from_str(text))
        except pyrage.RecipientError as exc:
            raise LocalBadRequestError(
                f"age_encryption_recipients[{position}] ({recipient!r:.60}) is not an age public key "
                f"(age1...) or an SSH public key: {exc}"
            ) from None
    return keys


def encrypt_files(files: Sequence[Path], keys: Sequence[Any]) -> None:
    """Replace each file by ``<file>.age``, encrypted to every one of ``keys`` (from ``parse_recipients``)."""
    import pyrage

    for file in files:
        pyrage.encrypt_file(str(file), str(file.with_name(file.name + SUFFIX)), list(keys))
        file.unlink()
