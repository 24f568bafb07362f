"""The one place that reads input files and writes output files.

Every package reads its documents and tables through here, so one set of rules holds
for every command, the daemon and any later API:

- **Text is UTF-8.** A leading byte-order mark and CRLF (or CR) line ends are
  accepted; any other encoding, a NUL byte, a file over its size limit or something
  that is not a regular file is an :class:`InputError` naming the file. ``.gz`` files
  are decompressed first, with the same limit on what comes out.
- **CSV tables** (:func:`read_csv`) have a header; a row with more fields than the
  header or a column named twice is refused rather than guessed at.
- **Documents are JSON or YAML, chosen by suffix** (``.yaml``/``.yml`` is YAML, any
  other suffix JSON). Both are held to JSON's data model: objects with string keys,
  each key once; lists; strings; finite numbers (integers within 64 bits); booleans;
  null. YAML aliases and tags for other types are refused (dates stay text), and
  size, nesting and the number of values are bounded, so a hostile document cannot
  blow up memory, time or the stack.
- **Outputs are checked before long work** (:func:`check_writable`,
  :func:`check_writable_dir`) and **written all-or-nothing** (:func:`atomic_write` and
  its two shorthands; :func:`replace_files` for a set of files that belong together):
  the bytes go to a temporary file in the target's directory, are flushed to disk and
  renamed over the target, so a reader sees the old file or the new one, never half
  of either, and a failure leaves no temporary file behind.

``what`` in every signature is the name the user knows the file by (``--out``,
``SCENARIO``, ``--history``): messages start from it.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gzip
import io
import json
import math
import os
import re
import stat
import tempfile
import warnings
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from contract.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

#: Scenario, plan and job-spec files. The largest plan (688,128 cells) is about 7 MB.
MAX_DOCUMENT_BYTES = 64 * 2**20
#: CSV tables (job history, traffic), after decompression.
MAX_TABLE_BYTES = 512 * 2**20
#: YAML is for hand-written files, and its loader builds about 0.3 MB of values a second.
MAX_YAML_BYTES = 2**20
#: Objects and lists inside objects and lists; the deepest legal document has 4.
MAX_NESTING = 32
#: Objects and lists in one document (a plan of 4,096 GPUs has 4,097), and values in
#: lists and objects (the largest plan has 688,128 cells). Counted on the text before
#: parsing, so that a file of ``[],[],[],...`` is refused before it fills memory.
MAX_CONTAINERS = 1_000_000
MAX_ITEMS = 4_000_000
#: Integers in documents fit a signed 64-bit word (what SQL and CP-SAT store).
MAX_ABS_INTEGER = 2**63 - 1

YAML_SUFFIXES = frozenset({".yaml", ".yml"})


# --- reading -------------------------------------------------------------------------------


def _regular_file_size(path: Path, what: str) -> int:
    try:
        info = path.stat()
    except OSError as error:
        raise InputError(what, "a readable file", str(path), hint=_reason(error)) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(what, "a regular file", str(path), hint=f"It is {_kind_of(info.st_mode)}.")
    return info.st_size


def _kind_of(mode: int) -> str:
    """What a file that is not a regular one is, for a message."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _too_large(path: Path, what: str, max_bytes: int) -> InputError:
    return InputError(
        what,
        f"a file of at most {max_bytes // 2**20} MiB",
        str(path),
        hint="It is larger; split it or raise the limit in contract/files.py.",
    )


def read_bytes(path: Path, what: str, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (decompressed when it ends in ``.gz``)."""
    size = _regular_file_size(path, what)
    compressed = path.suffix.lower() == ".gz"
    if size > max_bytes and not compressed:
        raise _too_large(path, what, max_bytes)
    try:
        with path.open("rb") as raw:
            if compressed:
                with gzip.GzipFile(fileobj=raw) as unzipped:
                    data = unzipped.read(max_bytes + 1)
            else:
                # The size can change between stat and read; read at most one byte too many.
                data = raw.read(max_bytes + 1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise InputError(what, "a gzip file", str(path), hint=f"{error}.") from None
    except OSError as error:
        raise InputError(what, "a readable file", str(path), hint=_reason(error)) from None
    if len(data) > max_bytes:
        raise _too_large(path, what, max_bytes)
    return data


def decode_text(data: bytes, what: str, *, source: str) -> str:
    """``data`` as UTF-8 text: a leading BOM dropped, CRLF and CR turned into LF."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(
            what,
            "UTF-8 text",
            Path(source).name,
            source=source,
            hint=f"Byte 0x{data[error.start]:02x} at offset {error.start} is not UTF-8; "
            "save the file as UTF-8.",
        ) from None
    if "\x00" in text:
        raise InputError(
            what,
            "text",
            Path(source).name,
            source=source,
            hint=f"It holds a NUL byte at offset {text.index(chr(0))}: binary data.",
        )
    # CRLF (and a lone CR, old Mac line ends) become LF: every parser here then sees one form.
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: Path, what: str, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of ``path`` (see the module's rules)."""
    return decode_text(read_bytes(path, what, max_bytes=max_bytes), what, source=str(path))


def read_document(path: Path, what: str) -> Any:
    """A JSON or YAML document (by suffix), held to JSON's data model."""
    if path.suffix.lower() in YAML_SUFFIXES:
        return parse_yaml(read_text(path, what, max_bytes=MAX_YAML_BYTES), what, source=str(path))
    return parse_json(read_text(path, what), what, source=str(path))


def read_mapping(
    path: Path, what: str, *, expected: str = "an object (a mapping of keys to values)"
) -> dict[str, Any]:
    """A document whose top level must be a mapping."""
    document = read_document(path, what)
    if not isinstance(document, dict):
        raise InputError("(top level)", expected, _type_name(document), source=str(path))
    return document


def parse_json(text: str, what: str, *, source: str) -> Any:
    """Parse JSON text: duplicate keys, NaN/Infinity (named by their field) and over-deep
    nesting are refused."""

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise InputError(
                    key, "given once in its object", "a second value", source=source, hint=_DUPLICATE_HINT
                )
            result[key] = value
        return result

    def no_constant(name: str) -> float:
        # Read as the float it spells, so that the check below names the field that holds it.
        return float(name)

    containers, items = text.count("[") + text.count("{"), text.count(",")
    if containers > MAX_CONTAINERS or items > MAX_ITEMS:
        raise InputError(
            what,
            f"a document of at most {MAX_CONTAINERS:,} objects and lists and {MAX_ITEMS:,} values",
            f"{containers:,} brackets and {items:,} commas",
            source=source,
        )
    try:
        document = json.loads(text, object_pairs_hook=unique_keys, parse_constant=no_constant)
    except InputError:
        raise
    except json.JSONDecodeError as error:
        raise _invalid(
            what, "JSON", source, f"line {error.lineno}, column {error.colno}: {error.msg}."
        ) from None
    except RecursionError:
        raise _too_deep(what, source) from None
    except ValueError as error:  # e.g. an integer of more than 4,300 digits
        raise _invalid(what, "JSON", source, f"{error}.") from None
    check_plain_data(document, what, source=source)
    return document


def parse_yaml(text: str, what: str, *, source: str) -> Any:
    """Parse YAML text into JSON's data model (see the module's rules)."""
    import yaml

    try:
        loader = _strict_yaml_loader()(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _refuse_aliases(node)
            document = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise _invalid(what, "YAML", source, f"{where}{str(error.problem).rstrip('.')}.") from None
    except RecursionError:
        raise _too_deep(what, source) from None
    except (yaml.YAMLError, ValueError, TypeError) as error:
        raise _invalid(what, "YAML", source, f"{error}.") from None
    check_plain_data(document, what, source=source)
    return document


def _refuse_aliases(root: Any) -> None:
    """Refuse a node graph in which any node is reached twice: that is what an alias does.

    An alias repeats a node without copying it, so a few lines can stand for billions
    of values ("billion laughs"); JSON has none, and neither do our documents. The walk
    stops at the first repeat, so it is linear in the size of the text.
    """
    import yaml

    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", node.start_mark)
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))


_DUPLICATE_HINT = "A repeated key would silently replace the first value; keep one."


def check_plain_data(document: object, what: str, *, source: str) -> None:
    """Refuse anything outside JSON's data model, non-finite numbers and deep nesting.

    A fast pass, level by level, finds whether anything is wrong; only then does a
    second pass spell out where (``jobs[3].gpus``), which costs a tuple per value.
    """
    if not _is_plain(document):
        _locate_problem(document, what, source=source)


def _plain_scalar(value: object) -> bool:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    if kind is int:
        return abs(value) <= MAX_ABS_INTEGER  # type: ignore[arg-type]
    return False


def _is_plain(document: object) -> bool:
    level: list[object] = [document]
    for _ in range(MAX_NESTING + 1):
        below: list[object] = []
        for node in level:
            if type(node) is dict:
                if not all(type(key) is str for key in node):
                    return False
                values: Any = node.values()
            elif type(node) is list:
                values = node
            elif _plain_scalar(node):
                continue
            else:
                return False
            for value in values:
                if type(value) is dict or type(value) is list:
                    below.append(value)
                elif not _plain_scalar(value):
                    return False
        if not below:
            return True
        level = below
    return False  # nested deeper than MAX_NESTING


def _locate_problem(document: object, what: str, *, source: str) -> None:
    """Raise the InputError for the first value :func:`_is_plain` refused, naming its field."""
    # Each entry: (value, depth, trail); a trail is (parent trail, key or index).
    stack: list[tuple[object, int, Any]] = [(document, 0, None)]
    while stack:
        node, depth, trail = stack.pop()
        if isinstance(node, dict | list) and depth >= MAX_NESTING:
            raise _too_deep(what, source)
        if isinstance(node, list):
            stack.extend((value, depth + 1, (trail, index)) for index, value in enumerate(node))
        elif isinstance(node, dict):
            for key, value in node.items():
                if type(key) is not str:
                    raise InputError(_field((trail, str(key))), "a text key", _type_name(key), source=source)
                stack.append((value, depth + 1, (trail, key)))
        elif type(node) is float and not _plain_scalar(node):
            raise InputError(
                _field(trail), "a finite number", node, source=source, hint="NaN and Infinity are not JSON."
            )
        elif type(node) is int and not _plain_scalar(node):
            raise InputError(
                _field(trail), "an integer within 64 bits", f"{len(str(node))} digits", source=source
            )
        elif not _plain_scalar(node) and type(node) not in (float, int):
            raise InputError(
                _field(trail),
                "a string, number, boolean, null, list or object",
                _type_name(node),
                source=source,
            )


def _field(trail: Any) -> str:
    """``jobs[3].gpus`` from a trail of keys and indices."""
    parts: list[object] = []
    while trail is not None:
        trail, key = trail
        parts.append(key)
    text = ""
    for key in reversed(parts):
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text or "(top level)"


def _invalid(what: str, language: str, source: str, hint: str) -> InputError:
    return InputError(what, f"valid {language}", Path(source).name, source=source, hint=hint)


def _too_deep(what: str, source: str) -> InputError:
    return InputError(what, f"a document nested at most {MAX_NESTING} levels deep", "deeper", source=source)


def _type_name(value: object) -> str:
    return {dict: "object", list: "list", str: "string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


#: A number with an exponent as JSON and YAML 1.2 write it (the YAML 1.1 of PyYAML wants
#: ``1.0e+6``).
_EXPONENT_NUMBER = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")


@functools.cache
def _strict_yaml_loader() -> Any:
    """A safe loader (libyaml's when installed: 50x faster) that refuses duplicate keys
    and leaves dates as text; aliases are refused by :func:`_refuse_aliases`."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc,valid-type]  # chosen at run time
        # Timestamps stay strings, as in JSON; dates would only be refused later. Numbers with
        # an exponent are numbers as in JSON and YAML 1.2 (`1e6`, `2.5E-3`): YAML 1.1 reads
        # them as text unless they have a dot and a signed exponent.
        yaml_implicit_resolvers = {  # noqa: RUF012  # PyYAML's own class-level table, replaced whole
            first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
            + ([("tag:yaml.org,2002:float", _EXPONENT_NUMBER)] if first in "+-0123456789." else [])
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, list | dict):
                    raise yaml.constructor.ConstructorError(
                        None, None, "a key must be text", key_node.start_mark
                    )
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice. {_DUPLICATE_HINT}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def read_csv(path: Path, what: str, *, max_bytes: int = MAX_TABLE_BYTES, **options: Any) -> pd.DataFrame:
    """A CSV table with a header row, read as UTF-8 text; ``options`` go to ``pandas.read_csv``.

    Refused rather than guessed at: an empty file, a column named twice in the header
    (pandas would rename the second ``name.1``) and a row with more fields than the
    header (pandas would quietly turn the first fields into an index).
    """
    import pandas as pd

    text = read_text(path, what, max_bytes=max_bytes)
    try:
        header = next(csv.reader(io.StringIO(text)), [])
    except csv.Error as error:
        raise InputError(
            what, "a CSV file with a header row", path.name, source=str(path), hint=f"{error}."
        ) from None
    repeated = [name for name, count in Counter(name.strip() for name in header).items() if count > 1]
    if repeated:
        raise InputError(repeated[0], "a column named once in the header", "named twice", source=str(path))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame: pd.DataFrame = pd.read_csv(io.StringIO(text), index_col=False, **options)
            return frame
    except pd.errors.EmptyDataError:
        raise InputError(what, "a CSV file with a header row", "an empty file", source=str(path)) from None
    except (pd.errors.ParserError, pd.errors.ParserWarning, ValueError) as error:
        raise InputError(
            what,
            "a CSV file whose rows have as many fields as its header",
            path.name,
            source=str(path),
            hint=f"{str(error).splitlines()[0].removeprefix('Error tokenizing data. C error: ')}.",
        ) from None


# --- checking output paths -------------------------------------------------------------------


def check_writable(path: Path, what: str, *, suffixes: Mapping[str, str] | None = None) -> None:
    """Refuse, before any long work, an output path that could not be written.

    ``path`` must be a new name or an existing regular file (not a directory, a device,
    a pipe or a symbolic link, which a rename would replace rather than write through),
    in a directory where a file can be created. With ``suffixes`` (suffix -> format
    name) the path must end in one of them.
    """
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise InputError(
            what,
            f"a file name ending in one of {sorted(suffixes)}",
            str(path),
            hint="The suffix chooses the format.",
        )
    try:
        info = path.lstat()
    except FileNotFoundError:
        pass
    except OSError as error:
        raise InputError(what, "a writable file path", str(path), hint=_reason(error)) from None
    else:
        if stat.S_ISLNK(info.st_mode):
            raise InputError(
                what,
                "a regular file or a new name",
                str(path),
                hint="It is a symbolic link; name its target instead.",
            )
        if not stat.S_ISREG(info.st_mode):
            raise InputError(
                what, "a regular file or a new name", str(path), hint=f"It is {_kind_of(info.st_mode)}."
            )
    _probe_directory(path.parent, what, target=path)


def check_writable_dir(path: Path, what: str) -> None:
    """Refuse an output directory that is not one, or in which no file can be created.

    A directory that does not exist yet passes when it could be created (its nearest
    existing ancestor is a writable directory); :func:`atomic_write` and
    :func:`replace_files` create it.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        pass
    except OSError as error:
        raise InputError(what, "a writable directory", str(path), hint=_reason(error)) from None
    else:
        if not stat.S_ISDIR(info.st_mode):
            raise InputError(what, "a directory", str(path), hint="It is a file; name a directory.")
    _probe_directory(path, what, target=path)


def _probe_directory(directory: Path, what: str, *, target: Path) -> None:
    """Create and remove a file in ``directory`` (or its nearest existing ancestor).

    Permission bits do not answer the question (root ignores them; /proc refuses
    anyway), so the check is the act itself, undone at once.
    """
    existing = directory
    while not existing.exists():
        if existing.is_symlink() or existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(
            what, "a path inside a directory", str(target), hint=f"{existing} is not a directory."
        )
    try:
        handle, probe = tempfile.mkstemp(prefix=".gpuplan-probe-", dir=existing)
    except OSError as error:
        raise InputError(
            what, "a path where files can be created", str(target), hint=f"{existing}: {_reason(error)}"
        ) from None
    os.close(handle)
    Path(probe).unlink()


# --- writing ---------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_write(path: Path, what: str) -> Iterator[IO[bytes]]:
    """A binary handle whose bytes replace ``path`` only when the block ends without error."""
    check_writable(path, what)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise InputError(what, "a writable file path", str(path), hint=_reason(error)) from None
    temp_path = Path(temporary)
    try:
        with os.fdopen(handle, "wb") as stream:
            os.fchmod(stream.fileno(), 0o666 & ~_umask())  # not mkstemp's 0600: others may read it
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        temp_path.replace(path)
    except BaseException as error:
        temp_path.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise InputError(what, "a writable file path", str(path), hint=_reason(error)) from None
        raise
    _fsync_directory(path.parent)


def _umask() -> int:
    """The process's umask, read without changing it where the system shows it (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes, what: str) -> Path:
    with atomic_write(path, what) as stream:
        stream.write(data)
    return path


def write_json_atomic(path: Path, payload: object, what: str = "--out") -> Path:
    """``payload`` as indented JSON, all-or-nothing."""
    return write_bytes_atomic(path, (json.dumps(payload, indent=1) + "\n").encode(), what)


def replace_files(directory: Path, files: Mapping[str, bytes], what: str) -> list[Path]:
    """Write every file of ``files`` (name -> bytes) into ``directory``, all or none.

    All are first written and flushed in a staging directory inside ``directory``;
    only then is each renamed into place (a rename within one file system cannot be
    half-done). A failure before the renames leaves ``directory`` as it was.
    """
    check_writable_dir(directory, what)
    for name in files:
        if Path(name).name != name or name.startswith("."):
            raise ValueError(f"file names must be plain, visible names; got {name!r}")
        check_writable(directory / name, what)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=directory))
    except OSError as error:
        raise InputError(what, "a writable directory", str(directory), hint=_reason(error)) from None
    try:
        for name, data in files.items():
            with (staging / name).open("wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
        written = []
        for name in files:
            (staging / name).replace(directory / name)
            written.append(directory / name)
    except OSError as error:
        raise InputError(what, "a writable directory", str(directory), hint=_reason(error)) from None
    finally:
        for leftover in staging.iterdir():
            leftover.unlink()
        staging.rmdir()
    _fsync_directory(directory)
    return written


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); skipped where directories cannot be opened."""
    with contextlib.suppress(OSError):
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def _reason(error: OSError) -> str:
    return f"{error.strerror or error}."


def describe_os_error(error: OSError) -> str:
    """One line for a file-system failure: the path and the reason."""
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}"
