"""reference.networks: the named links' figures against the standards and datasheets they cite."""

import pytest

from dlbench.reference.networks import ETH_TCP_EFFICIENCY, IB_EFFICIENCY, NETWORKS, find_network


def test_names_and_aliases_are_unique_and_found_in_any_case():
    names = [n.name for n in NETWORKS] + [a for n in NETWORKS for a in n.aliases]
    assert len(names) == len(set(names))
    assert find_network(" NVLink ") is find_network("nvlink4")
    assert find_network("carrier-pigeon") is None


def test_payload_rate_is_the_line_rate_less_the_headers():
    ten = find_network("10gbe")
    assert ten.gbit == pytest.approx(10.0)
    assert ten.payload_Bps == pytest.approx(10e9 / 8 * 1448 / 1580)
    assert ETH_TCP_EFFICIENCY == pytest.approx(0.916, abs=5e-4)
    assert IB_EFFICIENCY == pytest.approx(4096 / 4122)


def test_fdr_is_four_lanes_after_its_64b66b_code():
    assert find_network("fdr").gbit == pytest.approx(54.545, abs=1e-3)


def test_every_link_is_between_nodes_or_inside_one():
    kinds = {n.kind for n in NETWORKS}
    assert kinds == {"network", "intra"}
    assert all(n.kind == "intra" for n in NETWORKS if n.name.startswith(("nvlink", "pcie")))


def test_the_what_if_model_reads_the_one_table():
    from dlbench.whatif import networks
    assert networks.NETWORKS is NETWORKS and networks.find_network is find_network
