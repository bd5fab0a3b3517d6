"""The graph artefact: round trip, and refusal of every damaged, edited or foreign file."""

from __future__ import annotations

import hashlib
import json
import os
import struct

import numpy as np
import pytest

from postcode_privacy import ArtefactError, Graph, GraphError, PostcodePrivacyError
from postcode_privacy.graph import artefact
from postcode_privacy.graph.artefact import MAGIC, load_graph, save_graph
from postcode_privacy.graph.build import build_graph

ARRAYS = ("node_location", "loc_indptr", "loc_indices", "prior", "location_coordinates")


@pytest.fixture(scope="module")
def graph() -> Graph:
    rng = np.random.default_rng(5)
    labels = [f"AB{d} {s}{a}{b}" for d in (1, 2) for s in (0, 9) for a in "ABD" for b in "EFG"]
    xy = rng.integers(0, 3000, size=(len(labels), 2)).astype(float)
    xy[3] = xy[4] = xy[5]  # co-located postcodes
    prior = rng.integers(1, 1000, size=len(labels))
    return build_graph(
        labels,
        xy[:, 0],
        xy[:, 1],
        prior,
        params_extra={"source": "test"},
        provenance={"note": "fixture"},
    )


@pytest.fixture
def saved(graph, tmp_path):
    path = tmp_path / "g.ppgraph"
    save_graph(graph, path)
    return path


def assert_same(a: Graph, b: Graph) -> None:
    assert a.sha256 == b.sha256
    assert a.postcodes == b.postcodes
    assert a.params == b.params and a.provenance == b.provenance
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None and y is None) or np.array_equal(x, y), name


def header_of(data: bytes) -> tuple[int, int, dict]:
    pos = data.index(b"\n") + 1
    (length,) = struct.unpack("<Q", data[pos : pos + 8])
    start = pos + 8 + 32
    return pos, start, json.loads(data[start : start + length])


def rewrite_header(data: bytes, edit) -> bytes:
    """Apply ``edit`` to the JSON header and re-sign it with a correct header checksum."""
    pos, start, header = header_of(data)
    old_len = struct.unpack("<Q", data[pos : pos + 8])[0]
    edit(header)
    new = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    assert len(new) == old_len, "test edits must keep the header length"
    return (
        data[:pos]
        + struct.pack("<Q", len(new))
        + hashlib.sha256(new).digest()
        + new
        + data[start + old_len :]
    )


# -- round trip -----------------------------------------------------------------------------------


def test_round_trip(graph, saved):
    loaded = load_graph(saved)
    assert_same(graph, loaded)
    assert loaded.find("ab1 0ae") == graph.find("AB1 0AE") is not None
    assert loaded.label(3) == graph.label(3)
    assert loaded.coordinates("AB2 9DG") == graph.coordinates("AB2 9DG")
    assert loaded.members(loaded.node_location[3]).tolist() == [3, 4, 5]
    assert loaded.total_prior == graph.total_prior
    assert not loaded.node_location.flags.writeable  # memory-mapped, read-only
    assert Graph.load(saved).sha256 == graph.sha256


def test_lookups_on_a_loaded_graph(graph, saved, monkeypatch):
    from postcode_privacy.graph import _labels

    monkeypatch.setattr(_labels, "_SEARCHES_BEFORE_INDEX", 25)
    loaded = load_graph(saved)
    queries = graph.postcodes + [
        "ab1 0ae",
        "AB1 0AC",
        "ZZ9 9ZZ",
        "AB1 0A",
        "AB1 0AE\x00",
        "AB12 0AEE",
        "",
        "\u00e9",
    ]
    # The first 25 lookups are binary searches, the rest go through the label dict.
    assert [loaded.find(q) for q in queries] == [graph.find(q) for q in queries]
    assert loaded._labels.index_built


def test_resaving_a_loaded_graph_gives_identical_bytes(saved, tmp_path):
    again = tmp_path / "again.ppgraph"
    load_graph(saved).save(again)
    assert again.read_bytes() == saved.read_bytes()


def test_layout(saved):
    data = saved.read_bytes()
    assert data.startswith(MAGIC + b"1\n")
    pos, start, header = header_of(data)
    data_start = -(-(start + struct.unpack("<Q", data[pos : pos + 8])[0]) // 64) * 64
    assert header["format"] == 1
    for name, spec in header["arrays"].items():
        assert (data_start + spec["offset"]) % 64 == 0, name
    assert header["arrays"]["postcodes"]["dtype"] == "|S8"
    assert len(data) == data_start + header["data_nbytes"]


def test_bulk_label_lookups_equal_one_at_a_time(graph, saved):
    """``find_labels`` (one binary search for many, used by the release checks) answers as
    ``find`` does for text that is already normalised, on the loaded (byte) and the built
    (list) labels, including text that cannot be a label: too long, non-ASCII, holding NUL."""
    loaded = load_graph(saved)
    queries = graph.postcodes[::-1] + [
        "AB1 0AC",
        "ZZ9 9ZZ",
        "AB1 0A",
        "AB1 0AE\x00",
        "\x00AB1 0AE",
        "AB1 0AE ",
        "AB12 0AEE",
        "AB1 0AEAB1 0AE",
        "",
        "\u00e9",
        "AB1 0A\u00c9",
        "A",
        "zz",
    ]
    expected = [graph._labels.lookup(q) for q in queries]
    expected = [-1 if e is None else e for e in expected]
    assert loaded.find_labels(queries).tolist() == expected
    assert graph.find_labels(queries).tolist() == expected
    assert not loaded._labels.index_built  # no dict of every label was needed
    assert loaded.find_labels([]).tolist() == []


def test_bulk_lookups_of_non_ascii_labels(tmp_path):
    """Labels in ascending byte order (so a loaded graph searches its byte array) that are not
    all ASCII: the bulk lookup compares UTF-8 bytes, as ``find`` does."""
    labels = ["AB1 0AA", "AB1 0AB", "caf\u00e9", "zz"]
    g = Graph.from_edges(labels, [(0, 1), (1, 2), (2, 3)])
    save_graph(g, tmp_path / "x")
    loaded = load_graph(tmp_path / "x")
    queries = ["caf\u00e9", "cafe", "zz", "AB1 0AA", "caf\u00e9\u00e9\u00e9\u00e9", "\ud800"]
    expected = [2, -1, 3, 0, -1, -1]
    assert loaded.find_labels(queries).tolist() == expected
    assert g.find_labels(queries).tolist() == expected
    assert [loaded.find(q) for q in queries[:5]] == [2, None, 3, 0, None]


def test_labels_in_bulk_equal_one_at_a_time(tmp_path):
    """``labels_of`` (how a release names its outputs) gives ``label`` of each node, in order
    and with repeats, on loaded (byte) labels, after their list exists, and on built ones,
    non-ASCII labels included; out-of-range or non-integer node numbers are refused."""
    labels = ["AB1 0AA", "AB1 0AB", "caf\u00e9", "zz"]
    built = Graph.from_edges(labels, [(0, 1), (1, 2), (2, 3)])
    save_graph(built, tmp_path / "x")
    loaded = load_graph(tmp_path / "x")
    nodes = np.array([3, 2, 2, 0, 1, 3], dtype=np.int64)
    want = [labels[i] for i in nodes]
    assert built.labels_of(nodes) == want
    assert loaded.labels_of(nodes) == want
    assert loaded.labels_of(nodes.astype(np.int32)) == want
    assert loaded.labels_of(np.array([], dtype=np.int64)) == []
    loaded._labels.as_list()  # the list form answers too
    assert loaded.labels_of(nodes) == want
    for bad in (np.array([4]), np.array([-1]), np.array([0.0]), np.zeros((1, 1), dtype=int)):
        with pytest.raises((IndexError, TypeError)):
            loaded.labels_of(bad)


def test_graph_without_coordinates_and_unusual_labels(tmp_path):
    g = Graph.from_edges(
        ["a", "b\u00e9", "c c", "AB1 0AA"],
        [("a", "b\u00e9"), ("c c", "a"), (3, 0)],
        prior=[1, 2, 3, 4],
    )
    save_graph(g, tmp_path / "x")
    loaded = load_graph(tmp_path / "x")
    assert_same(g, loaded)
    assert loaded.find("b\u00e9") == 1 and loaded.find("ab10aa") == 3
    assert loaded.find_labels(["b\u00e9", "a", "ab10aa", "c c"]).tolist() == [1, 0, -1, 2]


def test_labels_with_nul_are_refused(tmp_path):
    g = Graph.from_edges(["a\x00", "b"], [(0, 1)])
    with pytest.raises(GraphError, match="NUL"):
        save_graph(g, tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def test_a_graph_changed_after_construction_is_not_saved(tmp_path):
    g = Graph.from_edges(["a", "b", "c"], [(0, 1), (1, 2)], prior=[1, 2, 3])
    with pytest.raises(ValueError, match="read-only"):
        g.prior[0] = 5
    g.prior.flags.writeable = True  # a caller set on it: the save still checks the content
    g.prior[0] = 5
    with pytest.raises(GraphError, match="changed"):
        save_graph(g, tmp_path / "x")


# -- atomic write ---------------------------------------------------------------------------------


def test_write_is_atomic_and_leaves_no_temporary_file(graph, tmp_path, monkeypatch):
    path = tmp_path / "g.ppgraph"
    save_graph(graph, path)
    before = path.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["g.ppgraph"]

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(artefact.os, "replace", failing_replace)
    other = Graph.from_edges(["a", "b"], [(0, 1)])
    with pytest.raises(PostcodePrivacyError, match="cannot write the output"):
        save_graph(other, path)
    assert [p.name for p in tmp_path.iterdir()] == ["g.ppgraph"]
    assert path.read_bytes() == before


# -- refusals -------------------------------------------------------------------------------------


def test_every_single_byte_corruption_is_refused(saved, tmp_path):
    data = saved.read_bytes()
    bad = tmp_path / "bad"
    bad.write_bytes(data)
    accepted = []
    with open(bad, "r+b") as handle:
        for i in range(len(data)):
            flipped = data[i] ^ (0x01 if i % 2 else 0x80)
            os.pwrite(handle.fileno(), bytes([flipped]), i)
            try:
                load_graph(bad)
            except ArtefactError:
                pass
            else:
                accepted.append(i)
            os.pwrite(handle.fileno(), data[i : i + 1], i)
    assert accepted == []
    assert load_graph(bad).sha256 == load_graph(saved).sha256


@pytest.mark.parametrize("keep", [0, 5, len(MAGIC) + 2, 40, 200, -200, -1])
def test_truncated_files_are_refused(saved, tmp_path, keep):
    data = saved.read_bytes()
    bad = tmp_path / "bad"
    bad.write_bytes(data[:keep] if keep >= 0 else data[: len(data) + keep])
    with pytest.raises(ArtefactError):
        load_graph(bad)


def test_extended_file_is_refused(saved, tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(saved.read_bytes() + b"\x00" * 64)
    with pytest.raises(ArtefactError, match="truncated or extended"):
        load_graph(bad)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"hello world\n",
        json.dumps({"sha256": "0" * 64}).encode(),
        os.urandom(4096),
        b"\x93NUMPY\x01\x00" + b"\x00" * 100,
        b"PK\x03\x04" + b"\x00" * 100,
    ],
)
def test_foreign_files_are_refused(tmp_path, content):
    bad = tmp_path / "bad"
    bad.write_bytes(content)
    with pytest.raises(ArtefactError):
        load_graph(bad)


def test_missing_file_is_refused_naming_it(tmp_path):
    with pytest.raises(
        ArtefactError, match=f"^the graph artefact does not exist: {tmp_path}/nope$"
    ):
        load_graph(tmp_path / "nope")


def test_future_format_version_is_refused(saved, tmp_path):
    data = saved.read_bytes()
    bad = tmp_path / "bad"
    bad.write_bytes(MAGIC + b"2" + data[len(MAGIC) + 1 :])
    with pytest.raises(ArtefactError, match="version 2"):
        load_graph(bad)


def test_edited_header_is_refused_even_with_a_fixed_checksum(saved, tmp_path):
    data = saved.read_bytes()
    bad = tmp_path / "bad"

    def edit_params(h):
        h["params"]["source"] = "tset"

    def edit_sha(h):
        h["sha256"] = h["sha256"][::-1]

    for edit, message in ((edit_params, "sha256"), (edit_sha, "sha256")):
        bad.write_bytes(rewrite_header(data, edit))
        with pytest.raises(ArtefactError, match=message):
            load_graph(bad)

    # Without fixing the checksum, any header edit is caught by it.
    edited = data.replace(b'"source":"test"', b'"source":"tset"')
    assert edited != data
    bad.write_bytes(edited)
    with pytest.raises(ArtefactError, match="checksum"):
        load_graph(bad)


def test_missing_or_extra_arrays_are_refused(saved, tmp_path):
    data = saved.read_bytes()
    bad = tmp_path / "bad"

    def rename(old, new):
        def edit(h):
            h["arrays"][new] = h["arrays"].pop(old)

        return edit

    for edit in (rename("prior", "prioR"), rename("loc_indptr", "loc_Indptr")):
        bad.write_bytes(rewrite_header(data, edit))
        with pytest.raises(ArtefactError, match="arrays"):
            load_graph(bad)


def test_arrays_swapped_in_the_header_are_refused(saved, tmp_path):
    data = saved.read_bytes()

    def swap(h):
        a = h["arrays"]
        a["node_location"]["offset"], a["prior"]["offset"] = (
            a["prior"]["offset"],
            a["node_location"]["offset"],
        )

    bad = tmp_path / "bad"
    bad.write_bytes(rewrite_header(data, swap))
    with pytest.raises(ArtefactError):
        load_graph(bad)


def test_an_asymmetric_artefact_is_refused_even_with_a_recomputed_hash(tmp_path):
    """The hash is not a signature: anyone can recompute it.  Symmetry (needed for the hop
    distance to be a metric) is therefore checked on every load, not trusted from the build."""
    import numpy as np

    from postcode_privacy import Graph
    from postcode_privacy.errors import GraphError

    g = Graph.from_edges(["A", "B", "C", "D"], [("A", "B"), ("B", "C"), ("C", "A"), ("C", "D")])
    g.loc_indptr = np.array([0, 1, 2, 4, 5], dtype=np.int64)  # directed cycle 0->1->2->0,
    g.loc_indices = np.array([1, 2, 0, 3, 2], dtype=np.int32)  # in- and out-degrees balanced
    g.sha256 = g._content_hash()
    g.save(tmp_path / "asym.ppgraph")
    with pytest.raises(GraphError, match="symmetric"):
        Graph.load(tmp_path / "asym.ppgraph")
