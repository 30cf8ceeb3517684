"""The host's side of a lab reached through a bastion: the controller is outside the cluster.

On the platform, a controller outside the cluster's network reaches no node directly: the cloud's
security groups admit SSH to the nodes from the bastion alone (stacks/components/aws.py, the
nodes' group; stacks/policy.py ``bastion-only-entry``). On this host the controller is the host
itself, which holds an address on the lab's management bridge (the apt proxy's). So while a lab
has a bastion, one nftables table of the lab's own refuses every connection the host opens out of
the cluster's bridges (management, fabric, rails), IPv4 and IPv6; the nodes' connections to the host (the proxy) and
its answers to them pass. The controller's only way to a node is then the bastion's outside
address, as the inventory's ProxyJump names it. The lab's own tooling enters a node from the
node's network namespace (gpucluster.lab.ssh), as a provider's console does, and is not affected.
"""

from __future__ import annotations

from gpucluster.lab.host import LabError, run, which
from gpucluster.lab.layout import LabLayout, _short_hash
from gpucluster.lab.state import atomic_write

FAMILY = "inet"
RULES_NAME = "host_firewall.nft"
# The table as nft listed it once applied: a later `lab up` compares the live table with it, so a
# rule deleted or changed by hand (the file alone unchanged) is applied again.
LISTED_NAME = "host_firewall.listed"


def table_name(lab_name: str) -> str:
    """The lab's own table (nftables names: a letter, then letters, digits and _)."""
    return f"gpucluster_{_short_hash(lab_name)}"


def rules(plan: LabLayout) -> str:
    """The table, as `nft -f` reads it: replaced whole (declared, deleted, declared again). Behind a
    bastion every new connection out of the cluster's bridges is refused; a twin reached directly
    from outside (twin.outside_cidr without a bastion) refuses those not from the controller's address."""
    name = table_name(plan.name)
    bridges = ", ".join(f'"{b}"' for b in (plan.management_bridge, plan.fabric_bridge, *plan.rail_bridges))
    out = f"oifname {{ {bridges} }} ct state new"
    reject = "reject with icmpx type admin-prohibited"
    if plan.bastion is None:
        # Reached directly from outside: the controller's connections come from its own address alone.
        refused = [f"{out} ip saddr != {plan.outside_host_ip} {reject}", f"{out} meta nfproto ipv6 {reject}"]
    else:
        # What the host opens itself out of the cluster's bridges, IPv4 or IPv6 (a node's link-local
        # address too); the nodes' own connections to the proxy, answered, pass, and the host's own
        # addresses there (the proxy's) are reached over lo.
        refused = [f"{out} {reject}"]
    return (
        f"table {FAMILY} {name}\n"
        f"delete table {FAMILY} {name}\n"
        f"table {FAMILY} {name} {{\n"
        "\tchain controller_out {\n"
        "\t\ttype filter hook output priority filter; policy accept;\n"
        + "".join(f"\t\t{rule}\n" for rule in refused)
        + "\t}\n"
        "}\n"
    )


def _nft() -> str:
    nft = which("nft")
    if nft is None:
        raise LabError("nft is not installed (Debian package nftables): a lab reached through a bastion needs it "
                       "to keep the host's own connections off the cluster's networks")
    return nft


def _listed(nft: str, name: str) -> str | None:
    """The table as nft lists it now, or None where there is none."""
    res = run([nft, "list", "table", FAMILY, name], "nft list table", check=False)
    return res.stdout if res.returncode == 0 else None


def _table_exists(nft: str, name: str) -> bool:
    return _listed(nft, name) is not None


def ensure(plan: LabLayout) -> bool:
    """The lab's table where it has a bastion, none where it has not; return whether it changed."""
    name = table_name(plan.name)
    stored = plan.lab_dir / RULES_NAME
    if plan.bastion is None and plan.outside_cidr is None:
        return remove(plan.name)
    nft = _nft()
    text = rules(plan)
    listed = plan.lab_dir / LISTED_NAME
    live = _listed(nft, name)
    if (live is not None and stored.is_file() and stored.read_text() == text and listed.is_file()
            and listed.read_text() == live):
        return False
    run([nft, "-f", "-"], f"nft: the host's table {name}", input_text=text)
    live = _listed(nft, name)
    if live is None:
        raise LabError(f"nft: the host's table {name} is not listed after it was applied")
    atomic_write(stored, text)
    atomic_write(listed, live)
    return True


def remove(lab_name: str) -> bool:
    """Delete the lab's table where it is; return whether it was there."""
    nft = which("nft")
    if nft is None:
        return False
    name = table_name(lab_name)
    if not _table_exists(nft, name):
        return False
    run([nft, "delete", "table", FAMILY, name], f"nft: delete the host's table {name}")
    return True
