"""The file-system edge: the trainer's own workdir reads and writes go through here.

A workdir is a local directory or a URL (`gs://bucket/run`, `s3://...`, `memory://...`).
Local paths use `os` directly, exactly as before. URLs go through fsspec (gcsfs for gs://,
installed by the `gcs` extra), so that all workers of a TPU pod share one workdir. Orbax reads
and writes the checkpoints itself (through etils.epath, which uses the same gcsfs for gs://
unless TensorFlow is installed); this module covers the trainer's own files. fsspec rather
than epath: epath knows only gs/s3/az/hf, so it cannot open the `memory://` URLs the tests
use to exercise this very code path.

Object stores have no directories, renames are copies, and objects cannot be appended to;
`makedirs` is a no-op there and `Appender` rewrites the whole object instead of appending.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import shutil
import uuid
from collections.abc import Iterator
from typing import Any, BinaryIO

from wgan_jax.errors import UserError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_remote(path: str) -> bool:
    """Whether `path` is a URL (`gs://`, `s3://`, `memory://`, ...) rather than a local path."""
    return bool(_URL.match(path))


def _filesystem(path: str) -> tuple[Any, str]:
    """The fsspec filesystem of a URL and the path within it."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(path)
    except ImportError as error:
        hint = " (pip install 'wgan_jax[gcs]')" if path.startswith(("gs://", "gcs://")) else ""
        raise UserError(f"cannot open {path}: {error}{hint}") from None


def join(path: str, *parts: str) -> str:
    """`path/part/...`; URLs always join with '/' and keep their scheme."""
    return posixpath.join(path, *parts) if is_remote(path) else os.path.join(path, *parts)


def abspath(path: str) -> str:
    """An absolute local path; a URL is already absolute and is returned unchanged."""
    return path if is_remote(path) else os.path.abspath(path)


def makedirs(path: str) -> None:
    """Creates a local directory and its parents if missing.

    A no-op for URLs: object stores create prefixes with the first object under them (and
    gcsfs would otherwise try to create a missing bucket).
    """
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)


def check_directory(path: str, what: str = "workdir") -> None:
    """`UserError` when local `path` cannot be a directory: it, or one of its parents, is an
    existing file (or another non-directory). A missing directory is fine (it is created);
    URLs are not checked (object stores have no directories)."""
    if is_remote(path):
        return
    current = os.path.abspath(path)
    while True:
        if os.path.lexists(current) and not os.path.isdir(current):
            if current == os.path.abspath(path):
                raise UserError(f"{what} {path} exists and is not a directory")
            raise UserError(f"{what} {path}: {current} exists and is not a directory")
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def check_writable_file(path: str, what: str) -> None:
    """`UserError` naming `what` and `path` when a file cannot be written there: `path` is a
    directory, its nearest existing parent is no directory, or a file cannot be created in
    it (probed by creating and removing one; the missing parents would be created). URLs are
    not probed."""
    if is_remote(path):
        return
    if os.path.isdir(path):
        raise UserError(f"{what} {path} is a directory; name a file in it")
    directory = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(directory):
        directory = os.path.dirname(directory)
    if not os.path.isdir(directory):
        raise UserError(f"{what} {path}: {directory} is not a directory")
    probe = os.path.join(directory, f".tmp-probe-{uuid.uuid4().hex}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        raise UserError(f"{what} {path}: cannot write in {directory} "
                        f"({error.strerror or error})") from None
    os.remove(probe)


def check_free_space(path: str, needed: int, what: str) -> None:
    """`UserError` when the local file system of `path` has less than `needed` bytes free
    (what the file will take), before anything is written; URLs are not checked."""
    if is_remote(path):
        return
    directory = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise UserError(f"{what} {path}: needs {needed / 1e9:.3g} GB, but {directory} has "
                        f"{free / 1e9:.3g} GB free")


@contextlib.contextmanager
def atomic_writer(path: str) -> Iterator[BinaryIO]:
    """A binary file to stream into that replaces `path` only when the block ends without
    an error (else it is removed): `write_atomic` for data too large to hold in memory.
    Local: a temporary file in the same directory, synced, then `os.replace`d. URLs: one
    upload, discarded on an error."""
    if is_remote(path):
        filesystem, inner = _filesystem(path)
        f = filesystem.open(inner, "wb")
        try:
            yield f
        except BaseException:
            with contextlib.suppress(Exception):
                f.discard()
            raise
        f.close()
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}-{os.path.basename(path)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def exists(path: str) -> bool:
    """Whether a file or directory (a prefix with objects, for URLs) exists."""
    if not is_remote(path):
        return os.path.exists(path)
    filesystem, inner = _filesystem(path)
    return filesystem.exists(inner)


def isdir(path: str) -> bool:
    """Whether `path` is a directory (for URLs: a prefix that holds objects)."""
    if not is_remote(path):
        return os.path.isdir(path)
    filesystem, inner = _filesystem(path)
    return filesystem.isdir(inner)


def listdir(path: str) -> list[str]:
    """The names (not paths) of the entries directly under a directory, in no fixed order."""
    if not is_remote(path):
        return os.listdir(path)
    filesystem, inner = _filesystem(path)
    inner = inner.rstrip("/")
    entries = (entry.rstrip("/") for entry in filesystem.ls(inner, detail=False))
    return [posixpath.basename(entry) for entry in entries if entry != inner]


def read_bytes(path: str) -> bytes:
    """The whole file. Raises `FileNotFoundError` if it does not exist."""
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    filesystem, inner = _filesystem(path)
    return filesystem.cat_file(inner)


def read_text(path: str) -> str:
    """The whole file as UTF-8 text with universal newlines (as `open(path).read()`)."""
    if not is_remote(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    return io.TextIOWrapper(io.BytesIO(read_bytes(path)), encoding="utf-8").read()


def write_atomic(path: str, data: str | bytes) -> None:
    """Replaces `path` with `data` (str is UTF-8 encoded) so that readers never see half a file.

    Local: a temporary file in the same directory (created with it if missing), synced, then
    `os.replace`d over the target. URLs: one object upload, which GCS and S3 make visible only
    once complete.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if is_remote(path):
        filesystem, inner = _filesystem(path)
        filesystem.pipe_file(inner, payload)
        return
    with atomic_writer(path) as f:
        f.write(payload)


def rename(src: str, dst: str) -> None:
    """Moves a file or directory tree (`os.replace` locally; copy then delete for URLs)."""
    if not is_remote(src):
        os.replace(src, dst)
        return
    filesystem, inner = _filesystem(src)
    filesystem.mv(inner, _filesystem(dst)[1], recursive=True)


def remove_tree(path: str) -> None:
    """Deletes a directory tree, best effort: errors (and a missing tree) are ignored."""
    if not is_remote(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    filesystem, inner = _filesystem(path)
    with contextlib.suppress(OSError):
        filesystem.rm(inner, recursive=True)


def _read_if_exists(path: str) -> bytes:
    try:
        return read_bytes(path)
    except FileNotFoundError:
        return b""


class Appender:
    """A UTF-8 text file that only grows (metrics.jsonl, events.jsonl).

    Local: a real file in append mode; `flush` flushes it. URLs: objects cannot be appended to,
    so the file's bytes (read when opened, e.g. on resume) are kept in memory and `flush`
    rewrites the whole object when something was written since the last flush.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.closed = False
        self._remote = is_remote(path)
        self._file = None if self._remote else open(path, "a", encoding="utf-8")
        self._data = bytearray(_read_if_exists(path) if self._remote else b"")
        self._dirty = False

    def write(self, text: str) -> None:
        """Appends `text`; it is durable after the next `flush`."""
        if self._file is not None:
            self._file.write(text)
            return
        self._data += text.encode("utf-8")
        self._dirty = True

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
        elif self._dirty:
            write_atomic(self.path, bytes(self._data))
            self._dirty = False

    def close(self) -> None:
        if self.closed:
            return
        self.flush()
        if self._file is not None:
            self._file.close()
        self.closed = True
