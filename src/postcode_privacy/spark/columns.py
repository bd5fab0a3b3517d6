"""The input's columns as Spark treats them, checked on the driver before any Spark job.

Both passes go through ``mapInArrow``, which cannot take every Spark type and parses column
names, and Spark compares names ignoring case unless told otherwise: an input it would trip on
is refused here, in the library's words.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..errors import InputDataError
from ..release.options import ReleaseOptions
from ..release.reader import refuse_postcodes_not_text


def _check_arrow_types(schema: StructType) -> None:
    """Refuse, before any Spark job, a column whose type Spark cannot hand to Python as Arrow
    (an interval year to month, a calendar interval, a char or varchar kept as such, or one of
    these inside a struct, array or map; a struct with two fields of one name): both passes go
    through ``mapInArrow``, which would otherwise fail after the check pass with PySpark's own
    error.  The column is named by its 1-based position and its type in plain words, as
    ``check_columns`` names columns."""
    from pyspark.sql.pandas.types import to_arrow_type

    for position, column in enumerate(schema.fields, start=1):
        try:
            to_arrow_type(column.dataType, timezone="UTC")
        except Exception:  # PySpark's type error: the type alone is the news
            raise InputDataError(
                f"column {position} holds {_spark_type_words(column.dataType)} that Spark "
                "cannot pass to Python as Arrow for the release; cast it (for example to a "
                "string) or leave it out first"
            ) from None
        if _repeats_a_field_name(column.dataType):
            # PySpark's conversion allows it, but the JVM refuses it when the release is
            # written, quoting the field names: refused here, before any job, naming nothing.
            raise InputDataError(
                f"column {position} holds structs with two fields of the same name, which "
                "Spark cannot pass to Python as Arrow for the release; rename a field, or "
                "leave the column out first"
            )


def _check_postcode_type(schema: StructType, options: ReleaseOptions) -> None:
    """Refuse a postcode column that does not hold text (binary values, numbers, lists) before
    any Spark job, naming its type, as a Parquet file's is refused (``refuse_postcodes_not_text``):
    every record would otherwise fail as not a postcode.  After ``_check_arrow_types``."""
    from pyspark.sql.pandas.types import to_arrow_type

    kind = schema[options.postcode_column].dataType
    refuse_postcodes_not_text(to_arrow_type(kind, timezone="UTC"))


def _repeats_a_field_name(kind) -> bool:
    """Whether a struct in ``kind`` (at any depth, inside arrays and maps too) has two fields
    of exactly the same name."""
    from pyspark.sql import types

    if isinstance(kind, types.StructType):
        names = [f.name for f in kind.fields]
        return len(set(names)) < len(names) or any(
            _repeats_a_field_name(f.dataType) for f in kind.fields
        )
    if isinstance(kind, types.ArrayType):
        return _repeats_a_field_name(kind.elementType)
    if isinstance(kind, types.MapType):
        return _repeats_a_field_name(kind.keyType) or _repeats_a_field_name(kind.valueType)
    return False


def _spark_type_words(kind) -> str:
    """A Spark column type in plain words, never its text: ``simpleString`` lists a struct's
    field names, which are the input's own (as ``release/type_words.py`` does for Arrow)."""
    from pyspark.sql import types

    for spark_type, words in (
        (types.StructType, "structs"),
        (types.ArrayType, "lists"),
        (types.MapType, "maps"),
        (types.YearMonthIntervalType, "intervals"),
        (types.DayTimeIntervalType, "intervals"),
        (types.CalendarIntervalType, "intervals"),
        (types.CharType, "fixed-length strings"),
        (types.VarcharType, "strings of bounded length"),
    ):
        if isinstance(kind, spark_type):
            return words
    return "values"


def _check_columns_ignoring_case(columns: list[str], options: ReleaseOptions) -> None:
    """Spark compares column names ignoring case unless ``spark.sql.caseSensitive`` is set:
    refuse, as ``check_columns`` does, two columns it would take for one, or an output column
    it would take for an input one (the release would fail later, or be unusable)."""
    # Columns are named by position only: a DataFrame read from a CSV file without a header
    # line has cell values for names.
    seen: dict[str, int] = {}
    for position, name in enumerate(columns, start=1):
        other = seen.setdefault(name.lower(), position)
        if other != position:
            raise InputDataError(
                f"columns {other} and {position} differ only in case, and Spark takes them for "
                "one (spark.sql.caseSensitive is off); rename one"
            )
    if options.out_column.lower() in seen:
        raise InputDataError(
            f"column {seen[options.out_column.lower()]} of the input has a name Spark takes "
            f"for {options.out_column!r} (it ignores case); choose another "
            f"{options.flag('out_column')}"
        )


def _quoted(name: str):
    return F.col("`" + name.replace("`", "``") + "`")


def _positional(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


def _positional_input(df: DataFrame) -> DataFrame:
    """Every column of ``df`` under positional names (``c0``, ``c1``, ...): what both passes
    hand to ``mapInArrow``, whose input names Spark parses (a name holding a dot or a backtick
    would fail there).  The same projection for both passes, so that Spark deals the records
    into partitions alike: a round-robin ``repartition(n)`` first sorts the rows by a hash of
    the columns read, and a check pass that read only the identifier and postcode numbered
    records differently from the release, naming rows that were fine (a review)."""
    names = list(df.columns)
    return df.select(
        *[_quoted(name).alias(alias) for name, alias in zip(names, _positional("c", len(names)))]
    )
