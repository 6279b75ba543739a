"""The real node's undo of iptables rules keeps what is not the node's (pure text filter)."""

from __future__ import annotations

from vllm_localenv.hoststate import HostSnapshot, _without_our_chains

SAVED = """*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:KUBE-FIREWALL - [0:0]
:VLLMOP-ISOLATE - [0:0]
:DOCKER-USER - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A FORWARD -j VLLMOP-ISOLATE
-A FORWARD -g CNI-FORWARD
-A FORWARD -j DOCKER-USER
-A KUBE-FIREWALL -j DROP
-A DOCKER-USER -j RETURN
COMMIT
"""


def test_only_the_nodes_chains_and_jumps_to_them_go() -> None:
    assert _without_our_chains(SAVED) == (
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:DOCKER-USER - [0:0]\n"
        "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A FORWARD -j DOCKER-USER\n"
        "-A DOCKER-USER -j RETURN\nCOMMIT\n"
    )


def test_differences_name_what_changed() -> None:
    before = HostSnapshot(links=["eth0", "lo"], sysctls={"net/ipv4/ip_forward": "0"})
    after = HostSnapshot(links=["eth0", "lo", "vllmop0"], sysctls={"net/ipv4/ip_forward": "1"})
    assert before.differences(before) == {}
    assert before.differences(after) == {
        "links": {"gone": [], "new": ["vllmop0"]},
        "sysctls": {"before": {"net/ipv4/ip_forward": "0"}, "after": {"net/ipv4/ip_forward": "1"}},
    }
