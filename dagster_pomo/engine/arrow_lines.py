"""A piece of a JSON Lines landing read by Arrow's JSON reader in one call, where that reads
it as the line-by-line checks would.

`ingest.read_piece` parses, checks and types each line in Python (about 5 µs a line);
Arrow's reader takes about 1 µs and refuses, on its own, most of what the checks refuse:
a repeated key, an unknown key, a value of the wrong kind for its column, an integer past
64 bits, an escaped lone surrogate, a raw control character (not: bytes that are not
UTF-8, a null, NaN, a missing column, a long number, all checked here). A piece is read
here only when every line is an object of the form ``{"relation": ..., "t": <ms>, "args":
{<columns>}}`` that Arrow reads and that the column checks below pass; any other piece (a
bad line, ``args`` as a list, ISO times, a ``null``, a long number) returns None and is
read line by line, so a bad line is still quarantined with its reason and its number.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from dagster_pomo.engine.lines import (
    NUMBER_DIGITS,
    Piece,
    TimeWindow,
    long_numbers,
    piece_bytes,
)
from dagster_pomo.engine.local.arrow_schemas import ARROW

# Column types Arrow reads as the checks type them (a `time` may be ISO text).
READS = {"int", "float", "str", "bool"}


@dataclass(frozen=True)
class Layout:
    """What the lines of a corpus's landing look like to Arrow: the input relations (in
    order), each one's columns, and the parse options with one struct of every column."""

    names: list[str]
    columns: list[list[str]]
    options: pj.ParseOptions

    @classmethod
    def of(
        cls,
        names: Sequence[str],
        columns: Mapping[str, Sequence[str]],
        types: Mapping[str, tuple[str, ...]],
    ) -> Layout | None:
        """The layout of input relations ``names`` (their ``columns`` and ``types``); None
        when a type is one Arrow cannot read as the checks do, or two relations give one
        column name two types."""
        fields: dict[str, pa.DataType] = {}
        for name in names:
            for column, typ in zip(columns[name], types[name], strict=True):
                if typ not in READS or fields.setdefault(column, ARROW[typ]) != ARROW[typ]:
                    return None
        schema = pa.schema(
            [
                pa.field("relation", pa.string()),
                pa.field("t", pa.int64()),
                pa.field("args", pa.struct([pa.field(c, t) for c, t in fields.items()])),
            ]
        )
        options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
        return cls(list(names), [list(columns[n]) for n in names], options)


# What a piece read here gives: per input relation (by index), its columns and times, in
# the order of its lines.
Events = dict[int, tuple[list[pa.ChunkedArray], np.ndarray]]


def _normal(values: pa.Array) -> pa.Array:
    """A float column with ``-0.0`` read as ``0.0`` (`cid.normal`: adding ``0.0`` does it)."""
    if pa.types.is_floating(values.type):
        return pc.add(values, pa.scalar(0.0, values.type))
    return values


def read_piece_arrow(layout: Layout, piece: Piece, window: TimeWindow) -> Events | None:
    """The events of ``piece`` (a JSON Lines piece) when Arrow reads it as the checks would
    (see the module's docstring); None when it must be read line by line."""
    block = piece_bytes(Path(piece.file), piece)
    if not block or b"null" in block:  # a null column reads as a missing one
        return None
    # Each line one object, `{` to `}`: no blank line (which Arrow skips), no bare CR (which
    # it may take for a line end), so that its rows are the lines one for one.
    lines = block.count(b"\n") + 1
    if b"\r" in block or not (block.startswith(b"{") and block.endswith(b"}")):
        return None
    if block.count(b"\n{") != lines - 1 or block.count(b"}\n") != lines - 1:
        return None
    if long_numbers(block, NUMBER_DIGITS + 1):
        return None  # Arrow reads into a float column numbers `decode` refuses
    if not block.isascii():
        try:  # Arrow lets through bytes that are not UTF-8 (an encoded lone surrogate)
            block.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        table = pj.read_json(
            io.BytesIO(block),
            read_options=pj.ReadOptions(use_threads=False, block_size=1 << 24),
            parse_options=layout.options,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != lines:
        return None
    relation, t, args = table["relation"], table["t"], table["args"]
    which = pc.index_in(relation, value_set=pa.array(layout.names, pa.string()))
    if which.null_count or t.null_count or args.null_count:
        return None  # a relation that is no input, a missing time or arguments
    times = t.to_numpy()
    if not (window.earliest <= times.min() and times.max() < window.latest):
        return None
    index = which.to_numpy()
    fields = {args.type.field(i).name: i for i in range(args.type.num_fields)}
    out: Events = {}
    for r in range(len(layout.names)):
        rows = np.flatnonzero(index == r)
        if not len(rows):
            continue
        mine = args.take(pa.array(rows))
        for column, i in fields.items():
            values = pc.struct_field(mine, [i])
            if column not in layout.columns[r]:
                if values.null_count != len(values):
                    return None  # another relation's column
            elif values.null_count:
                return None  # a missing column
            elif pa.types.is_floating(values.type) and not pc.all(pc.is_finite(values)).as_py():
                return None  # NaN or Infinity
        columns = [_normal(pc.struct_field(mine, [fields[c]])) for c in layout.columns[r]]
        out[r] = (columns, times[rows])
    return out
