r"""Tables: the one CSV writer of the package and its reader.

The writer makes ``metrics.csv``, ``uncertainty_scores.csv``, ``case_scores.csv``, ``shifts.csv``, ...

Every table has the same cell format (:func:`format_cell`), so that a column such as ``<measure>_<score>`` reads
the same in every file that has it:

=====================================  ==========================================================================
value                                  cell
=====================================  ==========================================================================
``None``                               empty (a value that does not exist, e.g. no shift label)
float (Python or NumPy)                ``repr(float(v))``: the shortest text that reads back as the same float64
                                       (``0.1``, ``0.30000001192092896`` for ``float32(0.3)``, ``1e-05``)
NaN, +inf, -inf                        ``nan``, ``inf``, ``-inf`` (``repr`` of the float)
bool (Python or NumPy)                 ``True`` / ``False``
int (Python or NumPy)                  the integer (``42``)
str, path                              the text (quoted by the ``csv`` module where needed)
=====================================  ==========================================================================

``float(cell)``, :func:`numpy.genfromtxt` and ``pandas.read_csv`` read ``nan`` / ``inf`` / ``-inf`` back as
NaN / infinity, and an empty cell as a missing value (NaN in a float column). Files are UTF-8 with ``\n`` line
ends, written under a temporary name and renamed (:func:`~monai_unc.io.files.atomic_path`).

Spreadsheets: a text cell (a case id, a region name, a path; the header too) that begins with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return is written with an apostrophe in front (``'=HYPERLINK(...)``), so that a
spreadsheet shows it as text instead of evaluating it as a formula (CSV injection: case ids come from file names a
hospital's systems chose); a text that begins with an apostrophe gets one more, so the rule can be undone.
:func:`read_csv` removes the apostrophe (every table round-trips); other readers see it. Numbers are never
escaped (``-0.5``, ``-inf`` stay numbers).
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..keys import NUMBER_SYNTAX
from .files import atomic_path

__all__ = ["CSV_NAN", "FORMULA_PREFIXES", "unescape_cell", "format_cell", "table_columns", "csv_text", "write_csv",
           "read_table", "read_csv", "parse_float", "cell_float"]

#: the characters around a cell that :func:`parse_float` ignores (``str.strip`` would also take Unicode spaces)
_CELL_SPACE = " \t\r\n"
#: how a NaN cell is written (``repr(float("nan"))``)
CSV_NAN = "nan"
#: first characters that make a spreadsheet read a text cell as a formula: such cells get an apostrophe in front
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def _escape_text(text: str) -> str:
    """``text`` as a cell no spreadsheet evaluates (an apostrophe in front of a formula prefix or an apostrophe)."""
    return "'" + text if text.startswith(FORMULA_PREFIXES) or text.startswith("'") else text


def unescape_cell(cell: Any) -> Any:
    """The text of a cell that :func:`write_csv` wrote: the apostrophe it puts in front of a formula removed.

    :func:`read_csv` applies it to every cell and column name; a reader of a table written by :func:`write_csv` that
    parses the file by other means (``csv.DictReader`` on a user's file that may also be one of ours) applies it
    itself.

    Args:
        cell: the cell text as in the file; anything else (``csv.DictReader``'s ``None`` for a short row's missing
            cell, its list of a long row's extra cells) is returned unchanged.

    Returns:
        ``cell`` without its leading apostrophe where :func:`write_csv` put one: before a formula prefix
        (:data:`FORMULA_PREFIXES`) or another apostrophe. Any other text is returned unchanged, so an apostrophe that a
        person typed in front of a plain id (``'case01``) stays; only a typed ``'=...`` or ``''...`` loses it.

    Example:
        >>> unescape_cell("'=SUM(A1:A2)"), unescape_cell("case01"), unescape_cell("''quoted"), unescape_cell(None)
        ('=SUM(A1:A2)', 'case01', "'quoted", None)
        >>> unescape_cell("'case01")  # no apostrophe of write_csv: kept
        "'case01"
    """
    if isinstance(cell, str) and len(cell) > 1 and cell[0] == "'" and (cell[1] == "'"
                                                                          or cell[1] in FORMULA_PREFIXES):
        return cell[1:]
    return cell


def format_cell(value: Any) -> str:
    """The text of one table cell (the rule in the module docstring).

    Args:
        value: ``None``, a bool, int or float (Python or NumPy scalar), a string or a path.

    Returns:
        ``""`` for ``None``; ``"True"`` / ``"False"`` for a bool; the integer for an int; ``repr(float(value))``
        for a float (round-trip exact; NaN ``"nan"``, infinities ``"inf"`` / ``"-inf"``); the text of a string or
        path.

    Raises:
        TypeError: ``value`` is of another type (a list, an array, ...): a table cell holds one value.

    Example:
        >>> [format_cell(v) for v in (None, True, 3, 0.1, float("nan"), float("-inf"), "a,b")]
        ['', 'True', '3', '0.1', 'nan', '-inf', 'a,b']
    """
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"value must be None, a bool, int, float, str or path for a table cell, got {type(value).__name__}")


def table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The union of the rows' keys in first-seen order (the columns :func:`write_csv` writes by default).

    Args:
        rows: the table's rows, one mapping per row.

    Returns:
        The column names.

    Example:
        >>> table_columns([{"case": "a", "dice": 0.9}, {"case": "b", "shift": "noise", "dice": 0.5}])
        ['case', 'dice', 'shift']
    """
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return list(columns)


def csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    r"""A table as the CSV text :func:`write_csv` writes (the same header, cells and line ends), in memory.

    Args:
        rows: one mapping ``{column: value}`` per row.
        columns: the columns in order (default: :func:`table_columns` of ``rows``); every key of every row must be
            one of them.

    Returns:
        The text (``\n`` line ends).

    Raises:
        ValueError: a row has a key that is not in ``columns``, or ``columns`` names a column twice.
        TypeError: a row is not a mapping, a column name is not a string, or a cell is not of a type
            :func:`format_cell` writes.

    Example:
        >>> csv_text([{"case": "=1+1", "score": float("nan"), "n": 3}])
        "case,score,n\n'=1+1,nan,3\n"
    """
    return _csv_text(rows, _csv_header(rows, columns))


def _csv_header(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None) -> list[str]:
    """The header of a table (:func:`csv_text`), after checking that every row is a mapping of its columns."""
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(f"rows[{i}] must be a mapping {{column: value}}, got {type(row).__name__}")
    header = table_columns(rows) if columns is None else list(columns)
    # found by hostile testing: a key 1 crashed with an AttributeError, columns [1] refused the rows' key 1 as not
    # among ['1'], and columns ['a', None] wrote a column named 'None'
    bad = [c for c in header if not isinstance(c, str)]
    if bad:
        where = "columns" if columns is not None else "the rows' keys"
        raise TypeError(f"{where} must be column names (str), got {bad[0]!r} ({type(bad[0]).__name__})")
    if len(set(header)) != len(header):
        raise ValueError(f"columns must be unique, got {header}")
    known = set(header)
    for i, row in enumerate(rows):
        extra = [k for k in row if k not in known]
        if extra:
            raise ValueError(f"rows[{i}] has keys {extra} that are not in columns {header}")
    return header


#: whether the csv module writes and reads a NUL character (from Python 3.11 on; 3.10's writer raises
#: ``csv.Error`` and its reader "line contains NUL")
_CSV_WRITES_NUL = sys.version_info >= (3, 11)


def _nul_stand_in(*texts: str) -> str:
    """A private-use character that none of ``texts`` holds: it stands in for NUL where 3.10's csv module refuses it."""
    return next(chr(c) for c in range(0xE000, 0xF900) if all(chr(c) not in t for t in texts))


def _csv_text(rows: Sequence[Mapping[str, Any]], header: Sequence[str]) -> str:
    """The CSV text of checked rows under ``header`` (:func:`csv_text`)."""
    f = io.StringIO(newline="")
    writer = csv.writer(f, lineterminator="\n")
    # the csv module quotes a cell with the line terminator "\n" but not one with a lone "\r", which every CSV
    # reader takes for a line end: a row holding one is written with every cell quoted
    quoted = csv.writer(f, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def write(cells: list[str]) -> None:
        quote = any("\r" in c for c in cells)
        if _CSV_WRITES_NUL or not any("\x00" in c for c in cells):
            (quoted if quote else writer).writerow(cells)
            return
        # Python 3.10's writer raises csv.Error on a NUL (found by running the tests on 3.10, the declared minimum):
        # a character no cell holds stands in for it, and the row is the text 3.11 writes (a NUL needs no quotes)
        stand = _nul_stand_in(*cells)
        row = io.StringIO(newline="")
        csv.writer(row, lineterminator="\n", quoting=csv.QUOTE_ALL if quote else csv.QUOTE_MINIMAL).writerow(
            [c.replace("\x00", stand) for c in cells])
        f.write(row.getvalue().replace(stand, "\x00"))

    def cell(value: Any) -> str:
        text = format_cell(value)
        return _escape_text(text) if isinstance(value, (str, os.PathLike)) else text

    if header:  # no columns: an empty table
        write([_escape_text(c) for c in header])
    for row in rows:
        write([cell(row.get(c)) for c in header])
    return f.getvalue()


def write_csv(
    path: str | os.PathLike, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None
) -> Path:
    r"""Write a table as CSV with the package's one cell format, atomically.

    The header is ``columns`` (default: :func:`table_columns` of ``rows``); a row without a column gets an empty
    cell. Cells follow :func:`format_cell`: NaN is written ``nan``, floats at full precision (``repr``, so
    ``float(cell)`` gives the same float64 back), ``None`` as an empty cell, ints as ints, bools as
    ``True`` / ``False``. ``pandas.read_csv``, ``numpy.genfromtxt`` and :func:`read_csv` with :func:`parse_float`
    read ``nan`` and empty cells back as NaN. A text cell that a spreadsheet would evaluate as a formula (it begins
    with one of :data:`FORMULA_PREFIXES`) gets an apostrophe in front (module docstring). The file (UTF-8, ``\n``
    line ends; the text of :func:`csv_text`) is written under a temporary name and renamed: an error mid-write (e.g.
    a cell of another type) leaves no file and keeps an older one.

    Args:
        path: the CSV file.
        rows: one mapping ``{column: value}`` per row.
        columns: the columns in order; every key of every row must be one of them.

    Returns:
        ``path``.

    Raises:
        ValueError: a row has a key that is not in ``columns``, or ``columns`` names a column twice.
        TypeError: a row is not a mapping, a column name is not a string, or a cell is not of a type
            :func:`format_cell` writes.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     write_csv(Path(d) / "scores.csv", [{"case": "a", "score": float("nan"), "n": 3}]).read_text()
        'case,score,n\na,nan,3\n'
    """
    header = _csv_header(rows, columns)
    path = Path(path)
    with atomic_path(path) as tmp:
        text = _csv_text(rows, header)  # a cell of another type fails here: no file, an older one kept
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            f.write(text)
    return path


def read_table(
    path: str | os.PathLike, *, return_lines: bool = False
) -> tuple[list[str], list[dict[str, str]]] | tuple[list[str], list[dict[str, str]], list[int]]:
    r"""The column names and rows of a CSV file, read strictly: the one reader of every table a person may edit.

    Tables come back from spreadsheets: Excel's "CSV UTF-8" puts a byte-order mark in front of the header, which is
    skipped (else the first column would be named ``"\ufeffcase"`` and silently missing), and a column name is
    taken without surrounding whitespace (a typed ``failure `` is the column ``failure``). What would be read as
    something else is refused instead: a column name given twice (the csv module keeps the last one's cells) and a
    row with more non-empty cells than the header has columns (a decimal comma in a comma-separated table:
    ``case,dice`` / ``a,0,85`` would read the Dice as ``0`` and drop ``85``). The header's columns end at its last
    named one: a header ending in separators (``case,dice,``, a spreadsheet's once-used column) has no more columns
    for such a row's ``85`` to hide in. Empty cells beyond them (trailing separators) are ignored; a row with fewer
    cells has None for the missing ones.

    Args:
        path: the CSV file (UTF-8, with or without a byte-order mark).
        return_lines: also return the line of the file each row starts on (blank lines are skipped and a quoted
            cell may hold line breaks, so a row's place in ``rows`` does not tell it), for messages about a row.

    Returns:
        ``(columns, rows)``: the header's column names (stripped) and one dict ``{column: cell text}`` per row,
        without the apostrophe :func:`write_csv` puts in front of a text a spreadsheet would evaluate
        (:func:`unescape_cell`); with ``return_lines``, ``(columns, rows, lines)``.

    Raises:
        ValueError: one line naming the file: not UTF-8 text, not CSV, a column name given twice, or a row (by
            line) with more cells than the header.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "t.csv"
        ...     _ = path.write_text("\ufeffcase,dice\r\na,0.5\r\n", encoding="utf-8")
        ...     read_table(path)
        (['case', 'dice'], [{'case': 'a', 'dice': '0.5'}])
    """
    name = os.fspath(path)
    columns: list[str] = []
    rows: list[dict[str, str]] = []
    lines: list[int] = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # utf-8-sig: a leading byte-order mark is skipped
            source: Any = f
            stand = None
            if not _CSV_WRITES_NUL:  # Python 3.10's reader refuses a NUL ("line contains NUL"; found by running the
                text = f.read()  # tests on 3.10, the declared minimum): a character the file lacks stands in for it
                if "\x00" in text:
                    stand = _nul_stand_in(text)
                    text = text.replace("\x00", stand)
                source = io.StringIO(text, newline="")
            reader = csv.reader(source)
            header = next(reader, None)
            if header is None:
                return (columns, rows, lines) if return_lines else (columns, rows)
            if stand is not None:
                header = [c.replace(stand, "\x00") for c in header]
            # surrounding spaces of a typed header cell ('failure ') would make it another column, silently unread
            columns = [unescape_cell(c).strip() for c in header]
            named = [c for c in columns if c != ""]  # empty names: trailing separators of a spreadsheet
            twice = sorted({c for c in named if named.count(c) > 1})
            if twice:
                raise ValueError(f"{name}: the column {twice[0]!r} is given twice in the header: keep one")
            # the header's columns end at its last named one: an unnamed column after it is a trailing separator,
            # and a cell there the spill of a decimal comma ('case,dice,' / 'a,0,85' read the Dice as 0; found by a
            # review of read_table)
            width = max((i + 1 for i, c in enumerate(columns) if c != ""), default=len(columns))
            end = reader.line_num  # the last line read: a row starts on the next one
            for cells in reader:
                start, end = end + 1, reader.line_num
                if not cells:  # a blank line
                    continue
                if stand is not None:
                    cells = [c.replace(stand, "\x00") for c in cells]
                if len(cells) > width and any(c.strip() for c in cells[width:]):
                    used = max(i + 1 for i, c in enumerate(cells) if c.strip())
                    raise ValueError(
                        f"{name}: line {reader.line_num} has {used} cells but the header {width} columns (a decimal "
                        "comma or a comma inside an unquoted cell?): quote the cell or write decimals with a point")
                row = {c: unescape_cell(v) for c, v in zip(columns, cells)}
                rows.append({c: row.get(c) for c in columns} if len(cells) < len(columns) else row)
                lines.append(start)
    except UnicodeDecodeError as e:  # the codec's message names no file
        raise ValueError(f"{name}: not UTF-8 text ({e.reason} at byte {e.start}): save the table as UTF-8 CSV"
                         ) from None
    except csv.Error as e:  # found by hostile testing: a cell over the csv module's limit was a traceback
        raise ValueError(f"{name}: not a readable CSV table (line {max(reader.line_num, 1)}: {e})") from None
    return (columns, rows, lines) if return_lines else (columns, rows)


def read_csv(path: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of a CSV file (e.g. one written by :func:`write_csv`) as ``{column: cell text}``.

    The file is read by :func:`read_table` (a byte-order mark skipped; a column given twice or a row with more
    cells than the header refused).

    Args:
        path: the CSV file (UTF-8).

    Returns:
        One dict per row, the cells as written (strings; :func:`parse_float` turns a numeric cell into a float),
        without the apostrophe :func:`write_csv` puts in front of a text a spreadsheet would evaluate.

    Raises:
        ValueError: the file is not UTF-8 text, or not a table :func:`read_table` reads (the message names it).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     rows = read_csv(write_csv(Path(d) / "metrics.csv", [{"case": "a", "dice": 0.5}, {"case": "b"}]))
        >>> rows
        [{'case': 'a', 'dice': '0.5'}, {'case': 'b', 'dice': ''}]
        >>> [parse_float(r["dice"]) for r in rows]
        [0.5, nan]
    """
    return read_table(path)[1]


def parse_float(cell: str | None) -> float:
    """A numeric cell of a table as a float, in the number syntax of JSON and CSV writers.

    An empty cell (or ``None``, a missing column) is NaN; ``nan`` / ``inf`` / ``-inf`` (also ``infinity``, any
    letter case) are NaN and infinities; a number is an optional sign, ASCII digits with an optional fraction and an
    optional exponent (``0.5``, ``-3``, ``1e-05``, ``.5``), surrounded by spaces or tabs at most. Python's ``float``
    also reads ``1_000`` as 1000, ``0.9_5`` as 0.95 and digits of other scripts (``١٢``, full-width ``１``): a cell a
    person typed or a program of another language wrote, which no CSV or JSON reader takes for that number (found by
    the lesionsr review); such cells are refused.

    Args:
        cell: the cell text.

    Returns:
        The float.

    Raises:
        ValueError: the cell is not a number in that syntax.

    Example:
        >>> [parse_float(c) for c in ("0.5", "", "nan", "-inf", " 1e3 ")]
        [0.5, nan, nan, -inf, 1000.0]
        >>> try:
        ...     parse_float("1_000")
        ... except ValueError as e:
        ...     print(str(e)[:35])
        cell must be a number (ASCII digits
    """
    if cell is None:
        return float("nan")
    if not isinstance(cell, str):
        raise TypeError(f"cell must be text or None, got {type(cell).__name__}")
    text = cell.strip(_CELL_SPACE)
    if not text:
        return float("nan")
    if NUMBER_SYNTAX.fullmatch(text) is None:
        raise ValueError(f"cell must be a number (ASCII digits, a sign, '.', an exponent; no '_' or grouping), nan, "
                         f"inf or empty, got {cell[:80]!r}")
    return float(text)


#: what :func:`cell_float` does with an empty cell and with NaN / infinity (its parameters ``missing``, ``non_finite``)
_CELL_CHOICES = {"missing": ("nan", "refuse"), "non_finite": ("keep", "refuse")}


def cell_float(value: Any, name: str | None = None, *, missing: str = "nan", non_finite: str = "keep") -> float:
    """A number of a table cell, or the same field read from JSON, as a float: the one strict reader of such numbers.

    Text is read by :func:`parse_float` (the number syntax of JSON and CSV writers: ``1_000``, ``0.9_5`` and digits
    of other scripts are refused; ``nan`` / ``inf`` / ``-inf`` are NaN and infinities). A number (``int``,
    ``float``, a NumPy integer or floating scalar) is taken as it is. ``None`` (a missing column, JSON's ``null``)
    and blank text are an empty cell. A bool (``True`` would read as 1.0), bytes, a container or any other object is
    refused. The callers' rules that differ are the two keyword arguments:

    ========================  ===============================================  ================================
    cell                      default                                          refused with
    ========================  ===============================================  ================================
    ``None``, ``""``, blank   NaN (an undefined value, e.g. no score)          ``missing="refuse"``
    ``nan``, ``inf``, NaN     NaN, +-inf as given                              ``non_finite="refuse"``
    ========================  ===============================================  ================================

    The rows of ``metrics.csv`` / ``triage.csv`` (:func:`monai_unc.evaluation.cohort.column_values`, ``as_float`` of the
    triage rule) take the defaults; the numbers of a DICOM SR refuse both (a cell refused there is no number of the
    SR).

    Args:
        value: the cell (text, a number or None).
        name: how an error names the cell (e.g. ``"triage.csv: line 3: field 'score'"``), or None: ``cell``.
        missing: ``"nan"`` or ``"refuse"``: what an empty cell gives.
        non_finite: ``"keep"`` or ``"refuse"``: what NaN and infinities give.

    Returns:
        The float.

    Raises:
        ValueError: text that is not a number in that syntax, or a cell the arguments refuse; the message names
            ``name``. Also ``missing`` or ``non_finite`` not one of its values.
        TypeError: a value that is neither text, a real number nor None (a bool included).

    Example:
        >>> [cell_float(v) for v in ("0.25", "", None, "nan", 3, " -inf ")]
        [0.25, nan, nan, nan, 3.0, -inf]
        >>> try:
        ...     cell_float("1_000", "metrics.csv: 'dice'")
        ... except ValueError as e:
        ...     print(str(e)[:50])
        metrics.csv: 'dice': cell must be a number (ASCII
        >>> try:
        ...     cell_float(None, "field 'score'", missing="refuse")
        ... except ValueError as e:
        ...     print(e)
        field 'score' must be a number, got an empty cell
        >>> try:
        ...     cell_float(True)
        ... except TypeError as e:
        ...     print(e)
        cell must be a number, text or None, got bool True
    """
    for arg, choice in (("missing", missing), ("non_finite", non_finite)):
        if choice not in _CELL_CHOICES[arg]:
            raise ValueError(f"{arg} must be one of {_CELL_CHOICES[arg]}, got {choice!r}")
    where = "cell" if name is None else name
    if isinstance(value, str):
        try:
            v = parse_float(value)
        except ValueError as e:
            raise ValueError(str(e) if name is None else f"{name}: {e}") from None
        empty = not value.strip(_CELL_SPACE)
    elif value is None:
        v, empty = math.nan, True
    elif isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where} must be a number, text or None, got {type(value).__name__} {str(value)[:80]}")
    else:
        v, empty = float(value), False
    if empty:
        if missing == "refuse":
            raise ValueError(f"{where} must be a number, got an empty cell")
        return v
    if non_finite == "refuse" and not math.isfinite(v):
        raise ValueError(f"{where} must be a finite number, got {v}")
    return v
