"""The CSV header's bounds and names, as ``perturb`` reads them (docs/release.md, "Limits and
unusual files"): the header line's length limit counts its characters, not its line break or a
byte-order mark, whatever the line break."""

from __future__ import annotations

import pytest

from postcode_privacy import InputDataError
from postcode_privacy.release import ReleaseOptions
from postcode_privacy.release.reader import MAX_HEADER_CHARS, TableReader

PREFIX = "subject,postcode,"
BREAKS = {"LF": "\n", "CRLF": "\r\n", "CR": "\r"}


def header_of(length: int) -> str:
    """A header line of exactly ``length`` characters, its last name made of ``h``."""
    return PREFIX + "h" * (length - len(PREFIX))


@pytest.mark.parametrize("bom", [False, True], ids=["no-bom", "bom"])
@pytest.mark.parametrize("newline", list(BREAKS), ids=list(BREAKS))
@pytest.mark.parametrize("delta", [-1, 0, 1], ids=["limit-1", "limit", "limit+1"])
def test_the_header_limit_counts_characters_not_the_line_break(tmp_path, bom, newline, delta):
    brk = BREAKS[newline]
    length = MAX_HEADER_CHARS + delta
    text = ("\ufeff" if bom else "") + header_of(length) + brk + "1,BD1 1AA,x" + brk
    (tmp_path / "in.csv").write_bytes(text.encode("utf-8"))
    if delta > 0:
        with pytest.raises(InputDataError, match="header line is longer than 1,000,000 char"):
            TableReader(tmp_path / "in.csv", 10)
    else:
        reader = TableReader(tmp_path / "in.csv", 10)
        assert reader.columns == header_of(length).split(",")


@pytest.mark.parametrize("delta", [-1, 0, 1], ids=["limit-1", "limit", "limit+1"])
def test_a_header_with_no_line_break_after_it_has_the_same_limit(tmp_path, delta):
    (tmp_path / "in.csv").write_text(header_of(MAX_HEADER_CHARS + delta))
    if delta > 0:
        with pytest.raises(InputDataError, match="header line is longer"):
            TableReader(tmp_path / "in.csv", 10)
    else:
        assert len(TableReader(tmp_path / "in.csv", 10).columns) == 3


@pytest.mark.parametrize("newline", list(BREAKS), ids=list(BREAKS))
def test_empty_lines_before_the_header_are_not_part_of_it(tmp_path, newline):
    brk = BREAKS[newline]
    text = brk * 5 + header_of(MAX_HEADER_CHARS) + brk + "1,BD1 1AA,x" + brk
    (tmp_path / "in.csv").write_text(text, newline="")
    assert TableReader(tmp_path / "in.csv", 10).columns == header_of(MAX_HEADER_CHARS).split(",")


@pytest.mark.parametrize("delta", [0, 1], ids=["limit", "limit+1"])
def test_a_line_break_inside_a_quoted_name_is_part_of_the_header(tmp_path, delta):
    # "subject,postcode," + '"' + a LF b + '"': the quotes and the inner LF are its text
    inner = MAX_HEADER_CHARS + delta - len(PREFIX) - 3
    name = "h" * (inner // 2) + "\n" + "h" * (inner - inner // 2)
    (tmp_path / "in.csv").write_text(PREFIX + '"' + name + '"\n1,BD1 1AA,x\n', newline="")
    if delta > 0:
        with pytest.raises(InputDataError, match="header line is longer"):
            TableReader(tmp_path / "in.csv", 10)
    else:
        assert TableReader(tmp_path / "in.csv", 10).columns[2] == name


# -- hostile headers ----------------------------------------------------------------------------


def test_a_file_of_only_a_byte_order_mark_is_empty(tmp_path):
    (tmp_path / "in.csv").write_bytes(b"\xef\xbb\xbf")
    with pytest.raises(InputDataError, match=r"is empty \(it holds only a byte-order mark\)"):
        TableReader(tmp_path / "in.csv", 10)


def options(**extra):
    return ReleaseOptions(epsilon=1, id_column="subject", postcode_column="postcode", **extra)


# Names that look alike: each pair differs only in characters that show nothing or in Unicode
# form, so a reader of the file (or of the release) cannot tell them apart.
LOOK_ALIKE = {
    "composed-decomposed": ("caf\u00e9", "cafe\u0301"),
    "zero-width-space": ("visit", "vis\u200bit"),
    "zero-width-joiner": ("visit", "visit\u200d"),
    "byte-order-mark": ("visit", "\ufeffvisit"),
    "control": ("visit", "visit\x07"),
    "variation-selector": ("visit", "visit\ufe0f"),
    "full-width": ("visit", "\uff56isit"),
    "compatibility": ("visit", "vi\u017fit"),  # a long s
    "no-break-space": ("a visit", "a\u00a0visit"),
    "invisible-between-letter-and-accent": ("caf\u00e9", "cafe\u200b\u0301"),
}


@pytest.mark.parametrize("pair", list(LOOK_ALIKE.values()), ids=list(LOOK_ALIKE))
def test_names_that_look_alike_are_duplicates(pair):
    first, second = pair
    with pytest.raises(InputDataError, match="columns 3 and 5 have names that differ only in"):
        options().check_columns(["subject", "postcode", first, "x", second])


TWINS = [
    "Postcode",
    "postcode ",
    " POSTCODE",
    "post\u200bcode",
    "postcode\u200b",
    "\ufeffpostcode",
    "post\u200dcode",
    "postcode\x00",
    "post\u00adcode",  # a soft hyphen (format)
    "\u202epostcode",  # a right-to-left override
    "\uff30ostcode",  # a full-width P
    "\uff30\uff2f\uff33\uff34\uff23\uff2f\uff24\uff25",
    "po\u017ftcode",  # a long s
    "postcode\u3000",  # an ideographic space
]


LOOKS_THE_SAME = TWINS[3:10] + ["po\u017ftcode"]


@pytest.mark.parametrize("twin", TWINS, ids=[t.encode("unicode_escape").decode() for t in TWINS])
def test_a_column_named_like_the_postcode_column_is_refused(twin):
    """It may hold the true postcodes too, and every other column is released as it is, under
    a name that looks like the true postcode column's (docs/release.md, "Limits and unusual files")."""
    names = ["subject", "postcode", "visit", twin]
    with pytest.raises(InputDataError, match=r"^column 4 is named like postcode_column 'postcode'"):
        options().check_columns(names)
    kept = options(keep_source_postcode=True)  # kept anyway: not a release
    if twin in LOOKS_THE_SAME:  # but the output may not hold two columns that look the same
        with pytest.raises(InputDataError, match="columns 2 and 4 have names that differ only"):
            kept.check_columns(names)
    else:
        kept.check_columns(names)


@pytest.mark.parametrize("twin", ["postcode_dp\u200b", "\uff50ostcode_dp", "postcode\ufe0f_dp"])
def test_a_column_that_looks_like_the_output_column_is_refused(twin):
    """The output would hold two columns a reader cannot tell apart, one of them released as
    it is."""
    with pytest.raises(InputDataError, match=r"named like out_column 'postcode_dp' \(column 3\)"):
        options().check_columns(["subject", "postcode", twin])


def test_a_postcode_twin_is_named_by_position_only():
    """Without a header line, the header is the first record: its cells are not echoed."""
    header = ["1001", "BD1 1AA", "bd1 1aa"]  # a record taken for the header
    plan = ReleaseOptions(epsilon=1, id_column="1001", postcode_column="BD1 1AA")
    with pytest.raises(InputDataError) as caught:
        plan.check_columns(header, header_line=True)
    assert str(caught.value).startswith("column 3 is named like")
    assert "bd1" not in str(caught.value)


def test_a_missing_column_points_to_its_near_miss_by_position_only():
    header = ["subject", "Post Code", "postcode\u00a0"]  # a no-break space after it
    with pytest.raises(InputDataError) as caught:
        options().check_columns(header)
    message = str(caught.value)
    assert "no column 'postcode'; column 3 has that name but for case" in message
    assert "Post Code" not in message  # the header's cells are not echoed
    with pytest.raises(InputDataError) as caught:
        options().check_columns(["Subject", "POSTCODE"])
    assert "columns 1 and 2 have that name but for case" in str(caught.value)


def test_a_header_read_from_utf16_without_a_byte_order_mark_says_so(tmp_path):
    """Such a file reads as UTF-8 with a NUL beside every letter: the message names the
    likely cause, not a near miss of case or spacing."""
    from postcode_privacy.mechanism import Key
    from postcode_privacy.release import release_file

    src = tmp_path / "in.csv"
    src.write_bytes("subject,postcode\nA1,LS1 1AA\n".encode("utf-16-le"))
    with pytest.raises(InputDataError, match="saved as UTF-16 without a byte order mark"):
        release_file(
            src,
            tmp_path / "out.csv",
            key=Key.generate(),
            options=options(),
            graph=lambda: None,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_perturb_refuses_a_postcode_twin_and_writes_nothing(tmp_path, capsys):
    from postcode_privacy.cli import main
    from postcode_privacy.graph.build import build_graph
    from postcode_privacy.keyfile import write_key_file
    from postcode_privacy.mechanism import Key

    build_graph(["BD1 1AA", "BD1 1AB"], [410000.0, 410100.0], [432000.0, 432000.0]).save(
        tmp_path / "g.ppgraph"
    )
    write_key_file(Key.from_bytes(b"t" * 32), tmp_path / "a.key")
    (tmp_path / "in.csv").write_text("subject,postcode,Postcode\n1,BD1 1AA,BD1 1AA\n")
    argv = ["perturb", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv")]
    argv += ["--key", str(tmp_path / "a.key"), "--graph", str(tmp_path / "g.ppgraph"), "-q"]
    argv += ["--epsilon", "1", "--id-column", "subject", "--postcode-column", "postcode"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "column 3 is named like --postcode-column 'postcode'" in err
    assert "BD1" not in err and "Postcode" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.key", "g.ppgraph", "in.csv"]
