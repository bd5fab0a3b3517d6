"""``perturb_frame`` and the index (and Arrow columns) of the frame it returns: under
``on_error="drop"`` no label that only a dropped record held survives anywhere in the result
(hostile reviews of rounds 22 and 23).

pandas keeps every level value of a MultiIndex, and every category of a categorical index,
when rows are taken from it: a dropped record's label would stay readable in
``result.index.levels`` or the index's dtype (and so in a Parquet file written from it).
"""

from __future__ import annotations

import io

import pandas as pd
import pytest
from optional import missing_from_this_machine

from postcode_privacy import Graph, Key, perturb_frame

CODES = [f"LS1 {d}{a}{b}" for d in (1, 2) for a in "ABD" for b in "ABDE"]


@pytest.fixture(scope="module")
def options():
    edges = [(i, i + 1) for i in range(len(CODES) - 1)]
    return dict(
        key=Key.from_bytes(b"i" * 32),
        graph=Graph.from_edges(CODES, edges),
        epsilon=1,
        id_column="subject",
        postcode_column="postcode",
        on_error="drop",
    )


def people(index: pd.Index) -> pd.DataFrame:
    """Three records on ``index``; the second has a malformed postcode and is dropped."""
    return pd.DataFrame(
        {"subject": ["a", "b", "c"], "postcode": [CODES[0], "not a postcode", CODES[5]]},
        index=index,
    )


def refused_under_drop_only(options, values, message: str) -> None:
    """A third column of Arrow ``values`` is refused by position under drop (``message``),
    and released whole when no row is left out."""
    from postcode_privacy.errors import InputDataError

    source = people(pd.RangeIndex(3)).assign(note=pd.arrays.ArrowExtensionArray(values))
    with pytest.raises(InputDataError, match=message):
        perturb_frame(source, **options)
    assert len(perturb_frame(source, **{**options, "on_error": "null"})) == 3


def test_multiindex_levels_lose_labels_only_dropped_records_held(options):
    index = pd.MultiIndex(  # "SPARE" is a level value no record uses: the caller's own
        levels=[["SPARE", "SECRET", "x", "z"], [1, 2, 3]],
        codes=[[2, 1, 3], [0, 1, 2]],
        names=["site", "visit"],
    )
    source = people(index)
    result = perturb_frame(source, **options)
    assert [list(level) for level in result.index.levels] == [["SPARE", "x", "z"], [1, 3]]
    assert list(result.index) == [("x", 1), ("z", 3)]  # the labels themselves unchanged
    assert result.index.names == ["site", "visit"]
    assert "SECRET" in list(source.index.levels[0])  # the input's index untouched


def test_categorical_index_and_levels_lose_dropped_categories(options):
    site = pd.Categorical(["x", "SECRET", "z"], categories=["x", "SECRET", "z", "SPARE"])
    flat = perturb_frame(people(pd.CategoricalIndex(site, name="site")), **options)
    assert list(flat.index.categories) == ["x", "z", "SPARE"]
    assert list(flat.index) == ["x", "z"] and flat.index.name == "site"

    nested = perturb_frame(people(pd.MultiIndex.from_arrays([site, [1, 2, 3]])), **options)
    level = nested.index.levels[0]
    assert "SECRET" not in list(level) and "SECRET" not in list(level.categories)
    assert list(nested.index) == [("x", 1), ("z", 3)]


def test_an_index_without_dropped_records_is_returned_as_it_was(options):
    index = pd.MultiIndex.from_arrays([["x", "y", "z"], [1, 2, 3]])
    kept = people(index).assign(postcode=[CODES[0], CODES[1], CODES[2]])
    result = perturb_frame(kept, **options)
    pd.testing.assert_index_equal(result.index, index, exact=True)
    nulled = perturb_frame(people(index), **{**options, "on_error": "null"})
    pd.testing.assert_index_equal(nulled.index, index, exact=True)


def test_pruned_categories_keep_their_order(options):
    """Only the dropped records' categories go: pandas' ``remove_categories`` would also sort
    the others of an unordered categorical, changing the dtype of cells that were kept."""
    note = pd.Categorical(["z", "SECRET", "a"], categories=["z", "SECRET", "a", "m"])
    result = perturb_frame(people(pd.RangeIndex(3)).assign(note=note), **options)
    assert list(result["note"].cat.categories) == ["z", "a", "m"]
    assert list(result["note"]) == ["z", "a"]


@pytest.mark.parametrize("name", ["postcode", "Postcode ", "POSTCODE"])
def test_an_index_named_like_the_postcode_column_is_refused(options, name):
    """``df.set_index("postcode", drop=False)`` puts the true postcodes in the index, which is
    released as it is: refused like a column named like the postcode column, by position
    and never by value, unless the true postcode is kept anyway."""
    from postcode_privacy import InputDataError

    source = people(pd.RangeIndex(3)).assign(postcode=[CODES[0], CODES[3], CODES[5]])
    indexed = source.set_index(source["postcode"].rename(name))
    with pytest.raises(InputDataError, match=r"^index level 1 is named like ") as failure:
        perturb_frame(indexed, **options)
    assert CODES[0] not in str(failure.value)
    nested = source.set_index([pd.Index([1, 2, 3], name="n"), source["postcode"].rename(name)])
    with pytest.raises(InputDataError, match=r"^index level 2 "):
        perturb_frame(nested, **options)
    kept = perturb_frame(indexed, **{**options, "keep_source_postcode": True})
    pd.testing.assert_index_equal(kept.index, indexed.index)


def test_an_arrow_dictionary_index_loses_labels_only_dropped_records_held(options):
    """An index read with ``dtype_backend="pyarrow"`` from a dictionary-encoded Parquet column
    keeps its whole dictionary when rows are taken from it, as a categorical index keeps its
    categories: the dropped record's label would stay in ``result.index.array``."""
    pa = pytest.importorskip("pyarrow")
    for kind in (pa.string(), pa.list_(pa.string())):
        values = ["x", "SECRET", "z"] if kind == pa.string() else [["x"], ["SECRET"], ["z"]]
        if kind == pa.string():
            labels = pa.array(values).dictionary_encode()
        else:
            inner = pa.array(["x", "SECRET", "z"]).dictionary_encode()
            labels = pa.ListArray.from_arrays(pa.array([0, 1, 2, 3], pa.int32()), inner)
        index = pd.Index(pd.arrays.ArrowExtensionArray(labels), name="site")
        result = perturb_frame(people(index), **options)
        assert "SECRET" not in str(result.index.array._pa_array), kind
        assert result.index.name == "site" and len(result) == 2
        assert [str(v) for v in result.index] == [str(v) for v in index[[0, 2]]]
        kept = perturb_frame(people(index)[[True, False, True]], **options)  # nothing dropped
        assert kept.index.array._pa_array.equals(index[[0, 2]].array._pa_array)


def test_an_arrow_dictionary_multiindex_level_loses_labels_only_dropped_records_held(options):
    """``groupby`` on a dictionary column read with ``dtype_backend="pyarrow"`` makes a level
    that is an Arrow dictionary; trimming the level's values left its dictionary whole."""
    import io
    import pickle

    pa = pytest.importorskip("pyarrow")
    site = pd.arrays.ArrowExtensionArray(pa.array(["x", "SECRET", "z"]).dictionary_encode())
    source = people(pd.RangeIndex(3)).assign(site=site, visit=[1, 2, 3])
    grouped = source.groupby(["site", "visit"]).first()
    assert isinstance(grouped.index.levels[0].dtype, pd.ArrowDtype)
    result = perturb_frame(grouped, **options)
    assert list(result.index) == [("x", 1), ("z", 3)]
    parquet = io.BytesIO()
    result.to_parquet(parquet)
    assert b"SECRET" not in pickle.dumps(result) and b"SECRET" not in parquet.getvalue()


def test_arrow_columns_drop_cannot_rewrite_are_refused_never_leaked(options):
    """A dictionary inside a union column cannot be encoded afresh, and Arrow cannot take rows
    of a run-end-encoded column: each is refused naming the column by position, before any
    draw, instead of keeping the dropped cell (union) or failing with Arrow's own error."""
    import pickle

    from postcode_privacy.errors import InputDataError

    pa = pytest.importorskip("pyarrow")
    secret = pa.array(["x", "SECRET", "z"]).dictionary_encode()
    union = pa.UnionArray.from_sparse(pa.array([0, 0, 0], pa.int8()), [secret])
    run_ends = pa.RunEndEncodedArray.from_arrays(pa.array([1, 2, 3], pa.int32()), secret)
    for column, message in ((union, "dictionary-encoded"), (run_ends, "run-end encoded")):
        source = people(pd.RangeIndex(3)).assign(note=pd.arrays.ArrowExtensionArray(column))
        with pytest.raises(InputDataError, match=f"^column 3 is {message}") as raised:
            perturb_frame(source, **options)
        assert "SECRET" not in str(raised.value)
        kept = perturb_frame(source, **{**options, "on_error": "null"})  # nothing left out
        assert len(kept) == 3 and b"SECRET" in pickle.dumps(kept)  # the caller's own cells


def test_categories_keep_their_dtype_when_a_dropped_value_is_removed(options):
    """Removing a dropped record's category rebuilt the categories from a list, so int8
    categories came back int64: the released column's dtype changed under the caller."""
    source = people(pd.RangeIndex(3)).assign(
        band=pd.Categorical([1, 2, 3], categories=pd.Index([1, 2, 3, 4], dtype="int8"))
    )
    result = perturb_frame(source, **options)
    assert list(result["band"].cat.categories) == [1, 3, 4]  # 2 only the dropped record held
    assert result["band"].cat.categories.dtype == "int8"


@pytest.mark.parametrize("kind", ["string_view", "binary_view"])
def test_arrow_view_columns_are_refused_under_drop_by_position(options, kind):

    pa = pytest.importorskip("pyarrow")
    values = ["x", "SECRET", "z"] if kind == "string_view" else [b"x", b"SECRET", b"z"]
    column = pa.array(values, getattr(pa, kind)())
    # (was Arrow's own error, halfway through)
    refused_under_drop_only(options, column, "^column 3 holds Arrow string or binary views")


def test_identifiers_too_large_for_text_or_a_float_are_failures_naming_the_row(options):
    """An int of over 4,300 digits raised Python's own ValueError, and a Fraction past any
    float an OverflowError; each is now a failing record, its value never quoted."""
    from fractions import Fraction

    from postcode_privacy.errors import InputDataError

    for huge in (10**5000, Fraction(10**400, 3)):
        source = people(pd.RangeIndex(3))
        source["subject"] = pd.Series([1, huge, 3], dtype=object)
        source["postcode"] = CODES[:3]
        with pytest.raises(InputDataError) as raised:
            perturb_frame(source, **{**options, "on_error": "error"})
        assert raised.value.row_errors[0][0] == 2 and "identifier" in raised.value.row_errors[0][1]
        assert "1000000000" not in str(raised.value) and len(perturb_frame(source, **options)) == 2


def test_a_postcode_cell_too_large_for_a_float_is_malformed_not_a_crash(options):
    from fractions import Fraction

    source = people(pd.RangeIndex(3))
    source["postcode"] = pd.Series([CODES[0], Fraction(10**400, 3), CODES[5]], dtype=object)
    assert len(perturb_frame(source, **options)) == 2


def test_a_subclass_metadata_is_not_carried_into_the_release(options):
    class Cohort(pd.DataFrame):
        _metadata = ["where_from"]

        @property
        def _constructor(self):
            return Cohort

    source = Cohort(people(pd.RangeIndex(3)))
    source.where_from = "SECRET ward list"
    result = perturb_frame(source, **options)
    assert type(result) is pd.DataFrame and not hasattr(result, "where_from")
    assert source.where_from == "SECRET ward list"  # the caller's frame is left as it was


def test_an_index_level_named_like_out_column_is_refused(options):
    from postcode_privacy.errors import InputDataError

    source = people(pd.Index([7, 8, 9], name="postcode_dp"))
    with pytest.raises(InputDataError, match="^index level 1 has the name given as out_column"):
        perturb_frame(source, **options)


def test_arrow_dictionary_categories_lose_a_dropped_value_from_the_dictionary(options):
    """Categories backed by an Arrow dictionary kept the whole dictionary after a category was
    filtered out, so the dropped record's value stayed in the released dtype's buffers."""
    import pickle

    pa = pytest.importorskip("pyarrow")
    categories = pd.Index(
        pd.arrays.ArrowExtensionArray(pa.array(["x", "SECRET", "z"]).dictionary_encode())
    )
    source = people(pd.RangeIndex(3)).assign(
        site=pd.Categorical(["x", "SECRET", "z"], categories=categories)
    )
    result = perturb_frame(source, **options)
    assert list(result["site"].cat.categories) == ["x", "z"]
    assert b"SECRET" not in pickle.dumps(result)


@pytest.mark.parametrize("large", [False, True])
def test_arrow_list_view_columns_are_refused_under_drop(options, large):
    """Rows taken from a list view share its child values: the dropped row's items stayed."""

    pa = pytest.importorskip("pyarrow")
    if not hasattr(pa, "list_view"):
        missing_from_this_machine("this pyarrow has no list views")
    kind = (pa.large_list_view if large else pa.list_view)(pa.string())
    column = pa.array([["x"], ["SECRET"], ["z"]], kind)
    nested = pa.StructArray.from_arrays([column], ["inner"])
    for values in (column, nested):
        refused_under_drop_only(options, values, "^column 3 holds Arrow list views")


def test_a_sparse_fill_value_only_dropped_records_held_is_refused(options):
    from postcode_privacy.errors import InputDataError

    secret = pd.arrays.SparseArray(["x", "SECRET", "z"], fill_value="SECRET")
    with pytest.raises(InputDataError, match="^column 3 is sparse") as raised:
        perturb_frame(people(pd.RangeIndex(3)).assign(note=secret), **options)
    assert "SECRET" not in str(raised.value)
    common = pd.arrays.SparseArray([0, 0, 5], fill_value=0)  # a kept record holds it too
    result = perturb_frame(people(pd.RangeIndex(3)).assign(n=common), **options)
    assert list(result["n"]) == [0, 5] and result["n"].dtype == common.dtype


def test_a_numpy_duration_identifier_is_a_failing_record_not_a_crash(options):
    """numpy files timedelta64 under its integers, and int() of one raised a raw TypeError."""
    import numpy as np

    from postcode_privacy.errors import InputDataError

    for when in (np.timedelta64(5, "D"), np.datetime64("2020-01-01")):
        source = people(pd.RangeIndex(3))
        source["subject"] = pd.Series(["a", when, "c"], dtype=object)
        source["postcode"] = CODES[:3]
        with pytest.raises(InputDataError) as raised:
            perturb_frame(source, **{**options, "on_error": "error"})
        assert raised.value.row_errors[0][0] == 2 and "identifier" in raised.value.row_errors[0][1]


@pytest.mark.parametrize("name", [0, "postcode_dp\u200b", "ｐｏｓｔｃｏｄｅ_dp"])
def test_an_index_level_named_like_out_column_as_text_or_on_screen_is_refused(options, name):
    """A level named 0 is the column "0" in a Parquet file; one that looks the same on screen
    clashes as an input column of that look does."""
    from postcode_privacy.errors import InputDataError

    out = "0" if name == 0 else "postcode_dp"
    source = people(pd.Index([7, 8, 9], name=name))
    with pytest.raises(InputDataError, match="^index level 1 has the name given as out_column"):
        perturb_frame(source, **{**options, "out_column": out})


def test_arrow_extension_columns_stored_as_dictionaries_or_views_are_refused_under_drop(options):
    """The checks looked through every Arrow type but an extension type's storage: a
    dictionary inside one kept the dropped value, a view raised Arrow's own error."""

    pa = pytest.importorskip("pyarrow")
    if not hasattr(pa, "opaque"):
        missing_from_this_machine("this pyarrow has no opaque extension type")
    words = pa.dictionary(pa.int8(), pa.string())
    stored = pa.array(["x", "SECRET", "z"], words)
    opaque = pa.ExtensionArray.from_storage(pa.opaque(words, "t", "v"), stored)
    view = pa.array(["x", "SECRET", "z"], pa.string_view())
    for values in (
        opaque,
        pa.StructArray.from_arrays([opaque], ["inner"]),
        pa.ExtensionArray.from_storage(pa.opaque(pa.string_view(), "t", "v"), view),
    ):
        refused_under_drop_only(options, values, "^column 3 holds an Arrow extension type")


def test_a_sparse_index_or_level_whose_fill_value_only_dropped_records_held_is_refused(options):
    from postcode_privacy.errors import InputDataError

    secret = pd.arrays.SparseArray(["a", "SECRET", "a"], fill_value="SECRET")
    with pytest.raises(InputDataError, match="^the index is sparse"):
        perturb_frame(people(pd.Index(secret)), **options)
    levels = pd.MultiIndex.from_arrays([secret, [1, 2, 3]])
    with pytest.raises(InputDataError, match="^index level 1 is sparse"):
        perturb_frame(people(levels), **options)


def test_a_sparse_column_of_unhashable_cells_is_judged_without_hashing(options):
    import numpy as np

    cells = np.empty(3, dtype=object)
    cells[:] = [{"a": 1}, {"SECRET": 2}, {"c": 3}]
    source = people(pd.RangeIndex(3)).assign(note=pd.arrays.SparseArray(cells, fill_value=0))
    assert len(perturb_frame(source, **options)) == 2  # (0, the fill, was no record's value)


def test_numbers_that_round_to_an_integer_are_not_taken_for_one():
    """float() rounded a Fraction or a long double before the integrality test, so 1/10^400
    became "0" and 1 + 2^-60 became "1": two people merged."""
    from fractions import Fraction

    import numpy as np

    from postcode_privacy.mechanism.subject import canonical_subject_id

    for near in (
        Fraction(1, 10**400),
        Fraction(3 * 2**52 + 1, 3),
        np.longdouble(2**52) + np.longdouble(0.5),
        np.longdouble(1) + np.longdouble(2.0**-60),
    ):
        if isinstance(near, np.longdouble) and near == float(near):
            continue  # (a platform whose long double is a double)
        with pytest.raises(ValueError, match="non-integral"):
            canonical_subject_id(near)
    assert canonical_subject_id(Fraction(5)) == "5" == canonical_subject_id(np.longdouble(5))


def test_a_decimal_of_scale_0_is_the_integer_it_holds():
    """A Parquet decimal(20, 0) column (and Spark's reading of an unsigned 64-bit one) was
    refused as an unsupported type, while the same ids as integers were released.  A decimal
    with digits after its point is refused even when they are zeros: its CSV text ("1.00")
    would be another subject, so one person would be two (a review of round 27)."""
    import sys
    from decimal import Decimal

    from postcode_privacy.mechanism.subject import canonical_subject_id
    from postcode_privacy.release.records import _identifier

    class Odd(Decimal):
        def __int__(self):
            raise RuntimeError("SECRET")

    big = 2**64 - 1
    for whole, text in (
        (Decimal(42), "42"),
        (Decimal("-7"), "-7"),
        (Decimal("-0"), "0"),
        (Decimal(big), str(big)),
        (Odd("123456789012345678901234567890"), "123456789012345678901234567890"),
    ):
        assert canonical_subject_id(whole) == text
    digits = sys.get_int_max_str_digits()
    assert canonical_subject_id(Decimal("9" * digits)) == "9" * digits
    for refused, reason in (
        (Decimal("42.00"), "scale is not 0"),
        (Decimal("1E+3"), "scale is not 0"),
        (Decimal("0E+5000"), "scale is not 0"),
        (Decimal("2.5"), "scale is not 0"),
        (Decimal("Infinity"), "non-integral"),
        (Decimal("NaN"), "missing"),
        (Decimal("sNaN"), "missing"),
        (Decimal("1E+999999999"), "scale is not 0"),  # refused before any integer is made
        (Decimal("9" * (digits + 1)), "too many digits"),  # as an integer of as many digits
    ):
        with pytest.raises(ValueError, match=reason):
            canonical_subject_id(refused)
    # A decimal NaN is a missing identifier, counted as one, as a float NaN is.
    assert _identifier(Decimal("NaN"))[1:] == ("missing_identifier", "missing identifier")
    assert _identifier(float("nan"))[1:] == ("missing_identifier", "missing identifier")


def test_identifier_subclasses_are_read_as_the_plain_values_they_hold():
    """A str subclass's own strip, or an int subclass's own __int__, decided the canonical
    form or raised with its own words (which may quote the value)."""
    from postcode_privacy.mechanism.subject import canonical_subject_id

    class Text(str):
        def strip(self, *chars):
            raise RuntimeError("SECRET")

    class Number(int):
        def __int__(self):
            raise RuntimeError("SECRET")

    class Real(float):
        def __float__(self):
            raise ValueError("SECRET")

    assert canonical_subject_id(Text(" ab ")) == "ab"
    assert canonical_subject_id(Number(5)) == "5"
    with pytest.raises(ValueError, match="^identifier has an unsupported type$"):
        canonical_subject_id(Real(2.0))


@pytest.mark.parametrize("kind", ["str", "string", "object"])
def test_the_released_column_is_text_of_the_kind_the_true_postcodes_were(options, kind):
    """Under pandas 3 text read with ``dtype=str`` is "str": a release of such a frame has its
    released postcodes as "str" too, so it equals the same release read back from CSV
    (``DataFrame.equals`` compares dtypes).  Found by a newcomer's review."""
    source = people(pd.RangeIndex(3)).astype(kind)
    for on_error in ("drop", "null"):
        result = perturb_frame(source, **{**options, "on_error": on_error})
        assert result["postcode_dp"].dtype == source["postcode"].dtype
        assert result["subject"].dtype == source["subject"].dtype
    released = perturb_frame(source.iloc[[0, 2]], **options)
    text = released.to_csv(index=False)
    back = pd.read_csv(io.StringIO(text), dtype=kind, keep_default_na=False)
    assert back.equals(released.reset_index(drop=True))
