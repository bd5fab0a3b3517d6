"""The Python API's refusals, as a notebook meets them: every one a ``PostcodePrivacyError``
naming the position or column, never a value, and a warning pointing at the caller's line."""

from __future__ import annotations

import warnings
from decimal import Decimal
from fractions import Fraction

import pandas as pd
import pytest
from graphs import leeds_grid

from postcode_privacy import Key, Mechanism, perturb_frame
from postcode_privacy.errors import (
    InvalidParameterError,
    PostcodePrivacyError,
    TeleportWarning,
    UnknownPostcodeError,
)

GRAPH, CODES = leeds_grid()
KEY = Key.from_bytes(bytes(range(32)))


@pytest.mark.parametrize("bad", [None, True, b"x", pd.NA, pd.NaT, "  ", 1.5, float("nan")])
def test_a_refused_identifier_is_the_librarys_error_at_its_position(bad):
    mechanism = Mechanism(GRAPH, 1)
    ids = ["a", "b", bad, "d"]
    with pytest.raises(InvalidParameterError, match=r"^subject_ids\[2\]: ") as caught:
        mechanism.perturb_many(KEY, ids, CODES[:4])
    assert isinstance(caught.value, PostcodePrivacyError)
    with pytest.raises(InvalidParameterError, match=r"^subject_ids\[2\]: "):
        mechanism.perturb_reference(KEY, ids, CODES[:4])
    with pytest.raises(PostcodePrivacyError):
        mechanism.perturb(KEY, bad, CODES[0])


@pytest.mark.parametrize("bad", [pd.NA, pd.NaT])
def test_pandas_missing_values_are_missing_identifiers_as_in_a_frame(bad):
    with pytest.raises(InvalidParameterError, match="missing identifier"):
        Mechanism(GRAPH, 1).perturb(KEY, bad, CODES[0])


def test_an_unknown_postcode_is_named_by_its_position_not_its_text():
    codes = [*CODES[:3], "ZZ9 9ZZ"]
    with pytest.raises(UnknownPostcodeError) as caught:
        Mechanism(GRAPH, 1).perturb_many(KEY, ["a", "b", "c", "d"], codes)
    assert str(caught.value).startswith("postcodes[3]: ")
    assert "ZZ9" not in str(caught.value)


def test_the_core_draws_are_unchanged_by_checking_positions():
    mechanism = Mechanism(GRAPH, 1)
    ids = [f"person-{i}" for i in range(len(CODES))]
    many = mechanism.perturb_many(KEY, ids, CODES)
    assert many == [mechanism.perturb(KEY, s, p) for s, p in zip(ids, CODES)]
    assert many == mechanism.perturb_reference(KEY, ids, CODES)


@pytest.mark.parametrize("epsilon", [Fraction(1, 2), 1 + 0j])
def test_an_epsilon_of_another_type_says_which_types_are_taken(epsilon):
    with pytest.raises(InvalidParameterError, match="an int, a float, a Decimal or decimal text"):
        Mechanism(GRAPH, epsilon)
    assert Mechanism(GRAPH, Decimal("0.5")).epsilon.text == "0.5"


def test_integer_column_labels_are_named_as_such():
    frame = pd.DataFrame({0: ["a", "b"], 1: CODES[:2]})
    with pytest.raises(InvalidParameterError, match="as text, not an int"):
        perturb_frame(frame, key=KEY, epsilon=1, id_column=0, postcode_column=1, graph=GRAPH)
    with pytest.raises(PostcodePrivacyError, match="column 1 is labelled by an int"):
        perturb_frame(frame, key=KEY, epsilon=1, id_column="0", postcode_column="1", graph=GRAPH)
    text = frame.set_axis(frame.columns.map(str), axis=1)
    released = perturb_frame(
        text, key=KEY, epsilon=1, id_column="0", postcode_column="1", graph=GRAPH
    )
    assert list(released.columns) == ["0", "postcode_dp"]


def test_a_library_warning_points_at_the_callers_line():
    frame = pd.DataFrame({"person": ["a", "b"], "pc": CODES[:2]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        perturb_frame(
            frame, key=KEY, epsilon=1, id_column="person", postcode_column="pc", graph=GRAPH,
            radius=1,
        )  # fmt: skip
    teleport = [w for w in caught if issubclass(w.category, TeleportWarning)]
    assert teleport and all(w.filename == __file__ for w in teleport)


def test_a_missing_column_is_not_blamed_on_labels_that_are_not_text():
    frame = pd.DataFrame({"person": ["a", "b"], 5: CODES[:2]})
    with pytest.raises(PostcodePrivacyError) as caught:
        perturb_frame(
            frame, key=KEY, epsilon=1, id_column="person", postcode_column="pc", graph=GRAPH
        )
    assert "labelled by" not in str(caught.value)
    with pytest.raises(InvalidParameterError, match="must be a non-empty column name"):
        perturb_frame(frame, key=KEY, epsilon=1, id_column=None, postcode_column=5, graph=GRAPH)


def test_the_small_public_helpers_answer_as_documented():
    from postcode_privacy import ReleaseOptions, SubjectIdError

    assert GRAPH.prior_of(CODES[0]) == 1
    options = ReleaseOptions(epsilon="0.50", id_column="person", postcode_column="pc")
    assert options.as_dict()["epsilon"] == "0.5"
    assert issubclass(SubjectIdError, InvalidParameterError)


def test_a_csv_files_failing_records_are_named_with_their_lines_in_pythons_message(tmp_path):
    """``release_file`` refuses a file's bad records with an ``InputDataError`` whose message
    names each record and the line it starts on, as the command line does; a quoted cell
    holding a line break puts them apart.  Dropping the lines from the message survived every
    test (a review of round 36)."""
    from postcode_privacy.errors import InputDataError
    from postcode_privacy.release import release_file

    src = tmp_path / "in.csv"
    src.write_text(f'person,pc,note\n1,{CODES[0]},"two\nlines"\n2,QQ-secret-99,x\n3,{CODES[1]},y\n')
    with pytest.raises(InputDataError) as caught:
        release_file(
            src, tmp_path / "out.csv", key=KEY, id_column="person", postcode_column="pc",
            graph=GRAPH, epsilon="1",
        )  # fmt: skip
    message = str(caught.value)
    assert "record 2 (line 4): " in message, message
    assert "QQ-secret-99" not in message  # the cell itself is never quoted
    assert not (tmp_path / "out.csv").exists()


def test_a_ledger_given_as_a_path_is_a_type_error_naming_the_argument(tmp_path):
    """``release_file(..., ledger="ledger.db")`` failed with Python's AttributeError ("'str'
    object has no attribute 'attach'"), and ``LedgerRecorder("ledger.db")`` only later (an API
    review of round 36); both now refuse it up front, naming what is wanted."""
    from postcode_privacy.ledger import LedgerRecorder
    from postcode_privacy.release import release_file

    src = tmp_path / "in.csv"
    src.write_text(f"person,pc\n1,{CODES[0]}\n")
    with pytest.raises(TypeError, match="ledger must be a postcode_privacy.ledger.LedgerRecorder"):
        release_file(
            src, tmp_path / "out.csv", key=KEY, id_column="person", postcode_column="pc",
            graph=GRAPH, epsilon="1", ledger=str(tmp_path / "ledger.db"),
        )  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    with pytest.raises(TypeError, match="ledger must be an open postcode_privacy.ledger.Ledger"):
        LedgerRecorder(str(tmp_path / "ledger.db"), budget=1)
