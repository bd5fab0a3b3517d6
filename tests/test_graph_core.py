"""In-memory graph construction and its preconditions (docs/methods.md, "Supported priors")."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import colocated, disconnected

from postcode_privacy import Graph, GraphError, InvalidParameterError, UnknownPostcodeError
from postcode_privacy.graph.shells import hop_distances, node_shells


def test_from_edges_basics():
    g = Graph.from_edges(["ls1 1aa", "LS1 1AB", "X"], [("LS1 1AA", "LS1 1AB"), (1, 2), ("X", "X")])
    assert len(g) == 3
    assert g.postcodes == ["LS1 1AA", "LS1 1AB", "X"]
    assert "ls11aa" in g and "LS1 1AA" in g and "LS9 9ZZ" not in g
    assert g.neighbours("LS1 1AB") == ["LS1 1AA", "X"]
    assert g.prior.tolist() == [1, 1, 1]
    assert g.sha256 == Graph.from_edges(["LS1 1AA", "LS1 1AB", "X"], [(0, 1), (2, 1)]).sha256


@pytest.mark.parametrize(
    "prior", [[1, 0], [1, -3], [1, 1.5], [1, "2"], [True, 1], [1, float("nan")], [1]]
)
def test_bad_priors_refused(prior):
    with pytest.raises(InvalidParameterError):
        Graph.from_edges(["A", "B"], [("A", "B")], prior)


def test_total_prior_checked_before_an_int64_sum_could_wrap():
    # As int64 these two sum to a negative number; the float check must catch it first.
    with pytest.raises(InvalidParameterError, match="2\\*\\*62"):
        Graph.from_edges(["A", "B"], [("A", "B")], np.array([2**62, 2**62], dtype=np.int64))
    with pytest.raises(InvalidParameterError):
        Graph.from_edges(["A", "B"], [("A", "B")], [2**62, 1])
    g = Graph.from_edges(["A", "B"], [("A", "B")], [2**61, 2**61])
    assert g.total_prior == 2**62


def test_duplicate_postcodes_and_unknown_edges_refused():
    with pytest.raises(GraphError):
        Graph.from_edges(["LS1 1AA", "ls1 1aa"], [])
    with pytest.raises(GraphError):
        Graph.from_edges(["A", "B"], [("A", "C")])
    with pytest.raises(GraphError):
        Graph.from_edges([], [])


def test_unknown_postcode_lookup_is_typed_and_silent():
    g = Graph.from_edges(["LS1 1AA"], [])
    with pytest.raises(UnknownPostcodeError) as info:
        g.index_of("SW1A 1AA")
    assert "SW1A" not in str(info.value)


def test_colocated_distances_are_those_of_the_clique():
    g = colocated()
    # N00, N01, N05 share location 0; N03, N04, N08 share location 2.
    d = hop_distances(g, 0, 10).tolist()
    assert d[0] == 0 and d[1] == 1 and d[5] == 1
    assert d[2] == 1  # location 1
    assert d[3] == d[4] == d[8] == 2
    assert d[6] == 3 and d[7] == 4
    assert [s.tolist() for s in node_shells(g, 0, 2)] == [[0], [1, 2, 5], [3, 4, 8]]


def test_disconnected_distances_are_capped():
    g = disconnected()
    d = hop_distances(g, 0, 3).tolist()
    assert d[:4] == [0, 1, 2, 3] and d[4:] == [3, 3, 3, 3]


def test_structure_validation():
    names = ["A", "B", "C"]
    with pytest.raises(GraphError, match="symmetric"):
        Graph(names, np.arange(3), np.array([0, 1, 1, 1]), np.array([1]))
    with pytest.raises(GraphError, match="first member"):
        Graph(names, np.array([1, 0, 2]), np.array([0, 0, 0, 0]), np.array([], dtype=np.int32))


def test_a_graph_keeps_copies_of_the_arrays_it_was_given():
    """The structure is checked and hashed once, at construction: a caller reusing its arrays
    afterwards must not change the graph (a review changed outputs under the same sha256 that
    way, and crashed the sampler with an index out of range)."""
    codes = [f"LS6 {i}AA" for i in range(1, 5)]
    node_location = np.arange(4, dtype=np.int32)
    indptr = np.array([0, 1, 3, 5, 6], dtype=np.int64)
    indices = np.array([1, 0, 2, 1, 3, 2], dtype=np.int32)
    coords = np.array([[430000.0 + 100 * i, 433000.0] for i in range(4)])
    graph = Graph(codes, node_location, indptr, indices, coordinates=coords)
    before = graph.sha256
    for given in (node_location, indptr, indices, coords):
        given[...] = 0
    assert graph._content_hash() == before
    assert list(graph.loc_indices) == [1, 0, 2, 1, 3, 2]
    assert graph.location_coordinates[3, 0] == 430300.0
    for kept in (graph.node_location, graph.loc_indices, graph.prior, graph.location_coordinates):
        with pytest.raises(ValueError, match="read-only"):
            kept[0] = 1  # nor through its own attributes
