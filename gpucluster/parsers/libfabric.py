"""libfabric's ``fi_info -p efa`` and the NCCL log lines that say which network NCCL uses.

``fi_info`` prints one block per endpoint: ``provider: efa``, ``fabric: ...``, ``domain:
efa_0-rdm``, ``version``, ``type: FI_EP_RDM``, ``protocol``. Without ``-t`` each device shows
twice (``-rdm`` and ``-dgrm`` domains), so devices are counted by domain without that suffix.

NCCL with ``NCCL_DEBUG=INFO`` names its network at init (``NCCL INFO Using network AWS
Libfabric``; the OFI plugin also logs ``NET/OFI Selected Provider is efa``) and each channel's
transport (``via NET/AWS Libfabric/0/GDRDMA``; ``GDRDMA`` means GPUDirect RDMA).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucluster.parsers.common import clean_lines

_KV = re.compile(r"(provider|fabric|domain|type|protocol|version):[ \t]*(\S{1,200})")
_NETWORK = re.compile(r"NCCL INFO Using network (.{1,80})$")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (\w{1,40})")
_CHANNEL = re.compile(r"via NET/([^/]{1,60})/\d{1,4}(/GDRDMA)?")


@dataclass
class FiInfo:
    endpoints: list[dict[str, str]] = field(default_factory=list)

    def devices(self, provider: str) -> list[str]:
        names = [e["domain"].rsplit("-", 1)[0] for e in self.endpoints
                 if e.get("provider") == provider and "domain" in e]
        return sorted(set(names))


def fi_info(text: str) -> FiInfo:
    out = FiInfo()
    for line in clean_lines(text):
        m = _KV.match(line)
        if m is None:
            continue
        key, value = m.group(1), m.group(2)
        if key == "provider":
            out.endpoints.append({})
        if out.endpoints:
            out.endpoints[-1][key] = value
    return out


@dataclass
class NcclNet:
    networks: list[str] = field(default_factory=list)  # "Using network ..." names, in order, unique
    providers: list[str] = field(default_factory=list)  # libfabric providers the OFI plugin chose
    channel_nets: list[str] = field(default_factory=list)  # transports of the NET channels
    gdrdma: bool = False


def nccl_net(text: str) -> NcclNet:
    out = NcclNet()
    for line in clean_lines(text):
        if "NCCL INFO" not in line:
            continue
        if (m := _NETWORK.search(line)) and m.group(1).strip() not in out.networks:
            out.networks.append(m.group(1).strip())
        if (m := _PROVIDER.search(line)) and m.group(1) not in out.providers:
            out.providers.append(m.group(1))
        if m := _CHANNEL.search(line):
            if m.group(1) not in out.channel_nets:
                out.channel_nets.append(m.group(1))
            out.gdrdma = out.gdrdma or bool(m.group(2))
    return out
