"""The CSV header's bounds and names, as ``perturb`` reads them (docs/release.md, "Limits and
unusual files"): the header line's length limit counts its characters, not its line break or a
byte-order mark, whatever the line break."""

from __future__ import annotations

import pytest

from postcode_privacy import InputDataError
from postcode_privacy.release.tables import MAX_HEADER_CHARS, TableReader

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
