"""``folder:/path``: a directory of PNG/JPEG files, converted once into an array_record dataset.

The conversion decodes every image (subfolders are walked), centre-crops and
resizes it to the configured size, converts it to the configured channels (RGBA sprites stay 4
channels) and writes one record per image: the raw uint8 bytes of `[S, S, C]`, with the shape in
`meta.json`. The result lives under the data dir, in a directory named by a hash of the file
list, sizes and mtimes, the image size and the channel count, so an edited folder or a new size
is converted again and the image folder itself is never written to. TensorFlow is not needed.

With `config.folder_classes = True` each immediate subfolder is a class (sorted names -> 0..K-1)
and every example's label is its subfolder's index (`class_names`, `folder_source`'s `classes`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import uuid

import numpy as np
from PIL import Image

from wgan_jax.data.images import MappedSource, prepare_image
from wgan_jax.errors import ConfigError, DataError

__all__ = ["folder_source", "list_images", "class_names", "IMAGE_SUFFIXES"]

log = logging.getLogger("wgan_jax")

#: The files a folder dataset reads (case-insensitive).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
FORMAT_VERSION = 1
RECORDS = "images.array_record"
META = "meta.json"


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _scan(root: str) -> tuple[list[tuple[str, int, int]], list[tuple[str, str]]]:
    """(images, others): (relative path, size, mtime_ns) of every regular PNG/JPEG file under
    `root` (a symlink to one counts), sorted by path; and (relative path, what it is) of the
    entries with an image name that are not readable regular files (FIFOs, sockets, devices,
    dangling symlinks): opening those would block or fail, so they are never opened."""
    found, others = [], []
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        for name in names:
            if name.lower().endswith(IMAGE_SUFFIXES) and not name.startswith("."):
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, root)
                try:
                    st = os.stat(path)
                except OSError as error:
                    link = os.path.islink(path)
                    others.append((rel, "a dangling symlink" if link else str(error)))
                    continue
                if not stat.S_ISREG(st.st_mode):
                    others.append((rel, _kind(st.st_mode)))
                    continue
                found.append((rel, st.st_size, st.st_mtime_ns))
    return sorted(found), sorted(others)


def list_images(root: str, skip_others: bool = False) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) of every PNG/JPEG file under `root`, sorted by path.

    An entry with an image name that is no regular file (a FIFO, a socket, a dangling
    symlink) is a `DataError` naming it, or with `skip_others` is left out with a warning.
    """
    files, others = _scan(root)
    if others:
        named = ", ".join(f"{rel} ({what})" for rel, what in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        if not skip_others:
            raise DataError(f"folder:{root}: {len(others)} image entries are not regular files: "
                            f"{named}{more}; remove them, or set config.skip_corrupt_images=True "
                            "to skip them")
        log.warning("folder:%s: skipping %d entries that are not regular files: %s%s", root,
                    len(others), named, more)
    return files


def fingerprint(files: list[tuple[str, int, int]], size: int, channels: int) -> str:
    """A hash of the file list (paths, sizes, mtimes) and the conversion settings."""
    h = hashlib.sha256(json.dumps([FORMAT_VERSION, size, channels, files]).encode())
    return h.hexdigest()[:16]


def decode_file(path: str, size: int, channels: int) -> np.ndarray:
    """One file -> uint8 `[size, size, channels]`; OSError/ValueError if it is corrupt."""
    with Image.open(path) as img:
        img.load()
        return prepare_image(img, size, channels, path)


def _convert(
    root: str, files: list[tuple[str, int, int]], out_dir: str, size: int, channels: int,
    skip_corrupt: bool,
) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    tmp = f"{out_dir}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.makedirs(tmp)
    skipped: list[str] = []
    count = 0
    try:
        writer = ArrayRecordWriter(os.path.join(tmp, RECORDS), "group_size:1")
        try:
            for rel, _, _ in files:
                path = os.path.join(root, rel)
                try:
                    image = decode_file(path, size, channels)
                except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
                    if not skip_corrupt:
                        raise DataError(
                            f"folder:{root}: cannot read image {path}: {error} (set "
                            "config.skip_corrupt_images=True to skip such files)"
                        ) from None
                    log.warning("folder:%s: skipping corrupt image %s (%s)", root, path, error)
                    skipped.append(rel)
                    continue
                writer.write(image.tobytes())
                count += 1
        finally:
            writer.close()
        if count == 0:
            raise DataError(f"folder:{root}: none of the {len(files)} image files could be read")
        meta = {
            "version": FORMAT_VERSION, "source": root, "num_examples": count,
            "shape": [size, size, channels], "skipped": skipped,
        }
        with open(os.path.join(tmp, META), "w") as f:
            json.dump(meta, f, indent=1)
        try:
            os.rename(tmp, out_dir)
        except OSError:  # another process finished the same conversion first
            if not os.path.exists(os.path.join(out_dir, META)):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _root(path: str) -> str:
    root = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(root):
        raise DataError(f"folder:{path}: no such directory")
    return root


def class_names(path: str) -> list[str]:
    """The classes of `folder:path` with `folder_classes`: its immediate subfolders, sorted.

    Raises a one-line `ConfigError` naming `config.folder_classes` and the folder when images
    lie directly in it, when a class subfolder has no images, or when there are fewer than 2.
    """
    root = _root(path)
    files = _scan(root)[0]  # entries that are no regular files are named by folder_source
    what = f"config.folder_classes: folder:{path}"
    loose = [rel for rel, _, _ in files if os.sep not in rel]
    if loose:
        raise ConfigError(f"{what} has {len(loose)} images directly in it (e.g. {loose[0]}); "
                          "with folder_classes every image must be in a class subfolder")
    names = sorted(entry.name for entry in os.scandir(root)
                   if entry.is_dir() and not entry.name.startswith("."))
    used = {rel.split(os.sep, 1)[0] for rel, _, _ in files}
    empty = [name for name in names if name not in used]
    if empty:
        raise ConfigError(f"{what}: class subfolder {empty[0]!r} has no PNG or JPEG images")
    if len(names) < 2:
        raise ConfigError(f"{what} has {len(names)} class subfolder(s); classes need at least 2")
    return names


def _labels(files: list[tuple[str, int, int]], skipped: list[str], names: list[str]) -> np.ndarray:
    """The class of every converted record: its file's subfolder's index in `names`."""
    index = {name: k for k, name in enumerate(names)}
    gone = set(skipped)
    return np.array([index[rel.split(os.sep, 1)[0]] for rel, _, _ in files if rel not in gone],
                    np.int64)


class _RawDecoder:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __call__(self, record: bytes) -> np.ndarray:
        return np.frombuffer(record, np.uint8).reshape(self.shape)


def prepared_dir(root: str, data_dir: str, size: int, channels: int,
                 files: list[tuple[str, int, int]] | None = None) -> str:
    """Where the converted dataset of `root` (of `files`, default `list_images(root)`) lives
    (converted or not)."""
    files = list_images(root) if files is None else files
    if not files:
        raise DataError(f"folder:{root}: no PNG or JPEG images found (searched recursively)")
    name = os.path.basename(os.path.normpath(root)) or "root"
    return os.path.join(data_dir, "folders", f"{name}-{fingerprint(files, size, channels)}")


def folder_source(
    path: str, data_dir: str, size: int, channels: int, skip_corrupt: bool = False,
    classes: bool = False,
) -> MappedSource:
    """The images of folder `path` as a random-access uint8 source (converting it if needed);
    with `classes`, labelled by their subfolder (`class_names`)."""
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    root = _root(path)
    names = class_names(path) if classes else None
    files = list_images(root, skip_others=skip_corrupt)
    out_dir = prepared_dir(root, data_dir, size, channels, files)
    if not os.path.exists(os.path.join(out_dir, META)):
        log.info("converting %d images of %s into %s", len(files), root, out_dir)
        try:
            os.makedirs(os.path.dirname(out_dir), exist_ok=True)
        except OSError as error:
            raise DataError(f"folder:{path}: cannot create data dir {data_dir}: {error}") from None
        _convert(root, files, out_dir, size, channels, skip_corrupt)
    with open(os.path.join(out_dir, META)) as f:
        meta = json.load(f)
    if meta["skipped"]:
        if not skip_corrupt:
            raise DataError(
                f"folder:{path}: {len(meta['skipped'])} corrupt images (e.g. "
                f"{meta['skipped'][0]}); set config.skip_corrupt_images=True to skip them"
            )
        log.warning("folder:%s: skipped %d corrupt image files of %d (first: %s)", path,
                    len(meta["skipped"]), len(files), meta["skipped"][0])
    records = ArrayRecordDataSource([os.path.join(out_dir, RECORDS)])
    if len(records) != meta["num_examples"]:
        raise DataError(f"folder:{path}: prepared dataset {out_dir} is incomplete; delete it")
    labels = None if names is None else _labels(files, meta["skipped"], names)
    return MappedSource(records, _RawDecoder(tuple(meta["shape"])), labels)
