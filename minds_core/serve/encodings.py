"""Request bodies sent with a ``Content-Encoding``: decoded before any route reads them, bounded as they grow.

The SDK compresses forward_backward bodies with zstd; other HTTP clients may send gzip or deflate. Each is
decompressed a piece at a time and refused (413) as soon as its output passes ``max_decompressed_bytes``,
so a small bomb never becomes a large allocation. Any other encoding is a 415 naming the ones served.
"""

from __future__ import annotations

import zlib

import zstandard

from minds_core.http.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

__all__ = ["ENCODINGS", "decode_body"]

#: The content codings served (``identity`` is the body as it is).
ENCODINGS = ("gzip", "deflate", "zstd", "identity")
#: Most codings one body may stack (``Content-Encoding: gzip, zstd``).
_MAX_LAYERS = 4
_PIECE = 1 << 20
#: zstd input fed at a time (its decompressor has no output bound of its own).
_ZSTD_FEED = 256


def decode_body(body: bytes, content_encoding: str, limit: int) -> bytes:
    """``body`` with every coding of ``content_encoding`` undone (the last applied first), at most ``limit`` bytes out."""
    codings = [name.strip().lower() for name in content_encoding.split(",") if name.strip()]
    if unknown := [name for name in codings if name not in (*ENCODINGS, "x-gzip")]:
        raise UnsupportedMediaType(
            f"Content-Encoding {unknown[0]!r} is not supported: send the body as it is, or compressed with "
            f"{', '.join(ENCODINGS[:-1])}"
        )
    if len(codings) > _MAX_LAYERS:
        raise BadRequest(f"Content-Encoding {content_encoding!r} stacks {len(codings)} codings: at most {_MAX_LAYERS}")
    if not body:
        return body
    for name in reversed(codings):
        if name == "zstd":
            body = _unzstd(body, limit)
        elif name in ("gzip", "x-gzip"):
            body = _inflate(body, zlib.MAX_WBITS | 16, limit, "gzip")
        elif name == "deflate":  # RFC 9110's zlib stream; some clients send the raw deflate stream instead
            zlib_header = len(body) > 1 and body[0] & 0x0F == 8 and ((body[0] << 8) | body[1]) % 31 == 0
            body = _inflate(body, zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS, limit, "deflate")
    return body


def _too_large(name: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The {name} body decompresses to more than this server's max_decompressed_bytes of {limit}: "
        "send smaller requests, or start minds serve with a larger --max-decompressed-bytes"
    )


def _inflate(body: bytes, wbits: int, limit: int, name: str) -> bytes:
    """A gzip (every member) or deflate body, decompressed a piece at a time."""
    out = bytearray()
    data = body
    try:
        while data:
            stream = zlib.decompressobj(wbits)
            while not stream.eof:
                piece = stream.decompress(data, min(_PIECE, limit + 1 - len(out)))
                out += piece
                if len(out) > limit:
                    raise _too_large(name, limit)
                data = stream.unconsumed_tail
                if not piece and not data:
                    raise BadRequest(f"The body ends in the middle of its {name} stream (Content-Encoding: {name})")
            data = stream.unused_data if wbits & 16 else b""  # gzip may hold several members one after another
    except zlib.error as exc:
        raise BadRequest(f"The body is not valid {name} (Content-Encoding: {name}): {exc}") from None
    return bytes(out)


def _unzstd(body: bytes, limit: int) -> bytes:
    """A zstd body (every frame), fed in small pieces: a piece of input yields at most a few MB (zstd's densest
    blocks expand 128 KiB from 4 bytes), so the output is checked against ``limit`` long before it is large."""
    out = bytearray()
    data = body
    try:
        while data:
            frame, fed = zstandard.ZstdDecompressor().decompressobj(), 0
            while not frame.eof and fed < len(data):
                out += frame.decompress(data[fed : fed + _ZSTD_FEED])
                fed += _ZSTD_FEED
                if len(out) > limit:
                    raise _too_large("zstd", limit)
            if not frame.eof:
                raise BadRequest("The body ends in the middle of its zstd stream (Content-Encoding: zstd)")
            data = frame.unused_data + data[fed:]
    except zstandard.ZstdError as exc:
        raise BadRequest(f"The body is not valid zstd (Content-Encoding: zstd): {exc}") from None
    return bytes(out)
