from __future__ import annotations

from gpucluster.conformance.fabric import fault_key
from gpucluster.conformance.pairs import PairResult, PairSearch, find_slow, ring_pairs, rounds

FLOOR = 1.0


def measure(pairs, slow=(), bad_links=()):
    """Synthetic pair figures: a slow node drags its pairs to 0.2 GB/s, a bad link to 0.3."""
    out = []
    for a, b in pairs:
        bw = 5.0
        if a in slow or b in slow:
            bw = 0.2
        if (a, b) in bad_links or (b, a) in bad_links:
            bw = 0.3
        out.append(PairResult(a, b, bw >= FLOOR, bw))
    return out


def test_ring_pairs_and_disjoint_rounds():
    names = [f"n{i}" for i in range(8)]
    pairs = ring_pairs(names)
    assert len(pairs) == 8 and all(sum(n in p for p in pairs) == 2 for n in names)
    rs = rounds(pairs)
    assert len(rs) == 2
    for rd in rs:
        flat = [n for p in rd for n in p]
        assert len(flat) == len(set(flat))
    assert len(rounds(ring_pairs(["a", "b", "c"]))) == 3
    assert ring_pairs(["a", "b"]) == [("a", "b")] and ring_pairs(["a"]) == []


def test_slow_node_is_named_and_no_other_fails():
    for n in (3, 4, 8):
        names = [f"n{i}" for i in range(n)]
        s = find_slow(names, measure(ring_pairs(names), slow={"n1"}))
        assert s.slow == ["n1"]
        assert s.nodes["n1"].status == "slow"
        assert "n0" in s.nodes["n1"].message and "n2" in s.nodes["n1"].message
        assert all(s.nodes[x].status == "ok" for x in names if x != "n1")


def test_two_slow_nodes_in_eight():
    names = [f"n{i}" for i in range(8)]
    s = find_slow(names, measure(ring_pairs(names), slow={"n2", "n6"}))
    assert s.slow == ["n2", "n6"]


def test_none_named_when_all_pass():
    names = [f"n{i}" for i in range(5)]
    s = find_slow(names, measure(ring_pairs(names)))
    assert s.slow == [] and all(v.status == "ok" for v in s.nodes.values())


def test_all_failing_cannot_single_out_and_fails_everyone():
    names = ["a", "b", "c"]
    s = find_slow(names, measure(ring_pairs(names), slow={"a", "b", "c"}))
    assert s.slow == [] and all(v.status == "undetermined" for v in s.nodes.values())


def test_two_nodes_cannot_tell_which():
    s = find_slow(["gpu-1", "gpu-2"], measure([("gpu-1", "gpu-2")], slow={"gpu-1"}))
    # No node blamed; both marked as in the slow pair, with the same words.
    assert s.slow == [] and {v.status for v in s.nodes.values()} == {"pair_slow"}
    for v in s.nodes.values():
        assert v.message.startswith("pair gpu-1/gpu-2 slow, cannot isolate with two nodes"), v.message
    assert fault_key(s, "gpu-1") == fault_key(s, "gpu-2") == "fabric-pair:gpu-1+gpu-2"
    # A pair of two that passes is simply ok.
    ok = find_slow(["gpu-1", "gpu-2"], measure([("gpu-1", "gpu-2")]))
    assert {v.status for v in ok.nodes.values()} == {"ok"}


def table(rows: str) -> list[PairResult]:
    """A pair table as an operator reads it: one ``a b ok|slow`` per line."""
    out = []
    for line in rows.strip().splitlines():
        a, b, verdict = line.split()
        out.append(PairResult(a, b, verdict == "ok", 5.0 if verdict == "ok" else 0.002))
    return out


def test_three_nodes_name_the_one_in_every_slow_pair():
    s = find_slow(["gpu-1", "gpu-2", "gpu-3"], table("""
        gpu-1 gpu-2 slow
        gpu-2 gpu-3 slow
        gpu-3 gpu-1 ok
    """))
    assert s.slow == ["gpu-2"] and s.nodes["gpu-2"].status == "slow"
    assert s.nodes["gpu-1"].status == s.nodes["gpu-3"].status == "ok"
    assert fault_key(s, "gpu-2") == "fabric-slow-node:gpu-2"


def test_three_nodes_one_slow_pair_is_the_link_not_a_node():
    s = find_slow(["gpu-1", "gpu-2", "gpu-3"], table("""
        gpu-1 gpu-2 slow
        gpu-2 gpu-3 ok
        gpu-3 gpu-1 ok
    """))
    assert s.slow == [] and s.nodes["gpu-1"].status == s.nodes["gpu-2"].status == "suspect"
    assert s.nodes["gpu-3"].status == "ok" and fault_key(s, "gpu-1") == "fabric-link:gpu-1+gpu-2"


def test_three_nodes_every_pair_slow_names_nobody():
    s = find_slow(["gpu-1", "gpu-2", "gpu-3"], table("""
        gpu-1 gpu-2 slow
        gpu-2 gpu-3 slow
        gpu-3 gpu-1 slow
    """))
    assert s.slow == [] and {v.status for v in s.nodes.values()} == {"undetermined"}
    assert fault_key(s, "gpu-1") == "fabric-ring"


def test_a_pair_cut_by_its_budget_keeps_the_size_it_reached():
    r = PairResult("gpu-1", "gpu-2", False, 0.0025, "slow", reached_bytes=4 << 20)
    s = find_slow(["gpu-1", "gpu-2", "gpu-3"], [r, *table("gpu-2 gpu-3 slow\ngpu-3 gpu-1 ok")])
    assert s.slow == ["gpu-2"]
    assert [p["reached_bytes"] for p in s.nodes["gpu-1"].pairs if p["peer"] == "gpu-2"] == [4 << 20]
    assert PairSearch.from_json(s.to_json()).results[0].reached_bytes == 4 << 20


def test_bad_link_between_good_nodes_is_suspect_not_passed():
    names = ["a", "b", "c", "d"]
    s = find_slow(names, measure(ring_pairs(names), bad_links={("a", "b")}))
    assert s.slow == []
    assert s.nodes["a"].status == "suspect" and s.nodes["b"].status == "suspect"
    assert s.nodes["c"].status == "ok" and s.nodes["d"].status == "ok"


def test_single_node_untested_and_json_round_trip():
    s = find_slow(["a"], [])
    assert s.nodes["a"].status == "untested"
    names = ["a", "b", "c"]
    s = find_slow(names, measure(ring_pairs(names), slow={"c"}))
    assert PairSearch.from_json(s.to_json()).slow == ["c"]


def test_a_slow_rail_names_the_node_and_the_rail():
    from gpucluster.conformance.pairs import rail_search

    nodes = ["n1", "n2", "n3"]
    fine = [PairResult("n1", "n2", True, 0.3), PairResult("n2", "n3", True, 0.3), PairResult("n3", "n1", True, 0.3)]
    throttled = [PairResult("n1", "n2", False, 0.002, "slow"), PairResult("n2", "n3", False, 0.002, "slow"),
                 PairResult("n3", "n1", True, 0.3)]
    search, per = rail_search(nodes, {"r0": fine, "r1": throttled})
    assert search.slow == ["n2"] and per["r1"].slow == ["n2"] and per["r0"].slow == []
    assert search.nodes["n2"].status == "slow"
    assert search.nodes["n2"].message.startswith("slow on rail(s) r1 (rail r1: ")
    assert search.nodes["n1"].status == "ok" and search.nodes["n3"].status == "ok"
    failing = [r for r in search.results if not r.ok]
    assert {(r.a, r.b) for r in failing} == {("n1", "n2"), ("n2", "n3")}
    assert all(r.message.startswith("rail r1: ") and r.busbw_gbps == 0.002 for r in failing)


def test_different_nodes_dead_on_different_rails_leave_the_healthy_node_ok():
    """a's first rail and b's second are dead: each rail names its node, and c, good on both, passes."""
    from gpucluster.conformance.pairs import rail_search

    def rail(dead: str) -> list[PairResult]:
        return [PairResult(x, y, dead not in (x, y), 0.001 if dead in (x, y) else 0.3, "slow" if dead in (x, y) else "")
                for x, y in ring_pairs(["a", "b", "c"])]

    search, per = rail_search(["a", "b", "c"], {"r0": rail("a"), "r1": rail("b")})
    assert (per["r0"].slow, per["r1"].slow) == (["a"], ["b"])
    assert search.slow == ["a", "b"]
    assert search.nodes["c"].status == "ok"
    assert search.nodes["a"].message.startswith("slow on rail(s) r0 (")
    assert search.nodes["b"].message.startswith("slow on rail(s) r1 (")


def test_two_nodes_with_a_slow_rail_cannot_be_told_apart():
    from gpucluster.conformance.pairs import rail_search

    search, _ = rail_search(["a", "b"], {"r0": [PairResult("a", "b", True, 0.3)],
                                          "r1": [PairResult("a", "b", False, 0.001, "slow")]})
    assert search.slow == []
    assert search.nodes["a"].status == search.nodes["b"].status == "pair_slow"
    assert "cannot isolate" in search.nodes["a"].message and "rail(s) r1" in search.nodes["a"].message


def test_rail_pings_are_read_per_rail_and_peer():
    from gpucluster.conformance.fabric import parse_rail_pings, rail_ping_command

    cmd = rail_ping_command("enp16s0np0", "10.77.2.11", 9000, "0 gpu-2")
    assert "-M do -s 8972" in cmd and "-I enp16s0np0 10.77.2.11" in cmd and cmd.endswith("&")
    # What the node prints (the lines of the background pings, in any order); junk is ignored.
    got = parse_rail_pings("1 gpu-2 1\n0 gpu-2 0\nping: warning\n0 gpu-3 2\n")
    assert got == {"0 gpu-2": True, "1 gpu-2": False, "0 gpu-3": False}


def test_rail_pings_cover_every_pair_of_a_small_cluster_and_the_ring_of_a_large_one():
    from gpucluster.conformance.fabric import RAIL_PING_ALL_MAX, rail_ping_pairs

    assert rail_ping_pairs(["a", "b", "c"]) == [("a", "b"), ("a", "c"), ("b", "c")]
    many = [f"n{i}" for i in range(RAIL_PING_ALL_MAX + 1)]
    assert rail_ping_pairs(many) == ring_pairs(many)


def test_a_nodes_verdict_per_rail_reads_back_from_the_measurements_json():
    from gpucluster.conformance.pairs import node_on_rails, rail_search, rail_status_text

    _, per = rail_search(["n1", "n2", "n3"], {
        "r0": [PairResult("n1", "n2", True, 0.3), PairResult("n2", "n3", True, 0.3), PairResult("n3", "n1", True, 0.3)],
        "r1": [PairResult("n1", "n2", False, 0.002), PairResult("n2", "n3", False, 0.002),
               PairResult("n3", "n1", True, 0.3)]})
    on = node_on_rails({rail: s.to_json() for rail, s in per.items()}, "n2")
    assert rail_status_text(on) == "r0 ok, r1 slow"
    assert node_on_rails(None, "n2") == {} and rail_status_text({}) == ""
