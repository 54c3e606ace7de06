"""hwloc 2 XML documents written by hand for the hwloc XML reader's tests: a minimal valid
one, and builders of ``<object>`` elements with their sets spelled as hwloc does (for rules no
fixture hits)."""

from __future__ import annotations


def cpus(text: str) -> frozenset[int]:
    """A cpulist written in a test (``0-3,8``) as a set, parsed here, not by affmon."""
    result: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        result.update(range(int(first), int(last or first) + 1))
    return frozenset(result)


# A minimal valid hwloc 2 document: one NUMA node, one core of two PUs (one allowed), one
# NVIDIA GPU under a bridge.
MINIMAL_V2 = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x0000000f" \
allowed_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" \
allowed_nodeset="0x00000001" gp_index="1">
    <object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x0000000f" \
nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2" local_memory="1073741824"/>
    <object type="Package" os_index="0" cpuset="0x00000003" complete_cpuset="0x0000000f" \
nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3">
      <object type="Core" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" \
nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="4">
        <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" \
nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="5"/>
        <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" \
nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="6"/>
      </object>
      <object type="Bridge" gp_index="7" bridge_type="0-1" depth="0" bridge_pci="0000:[00-01]">
        <object type="PCIDev" gp_index="8" pci_busid="0000:01:00.0" \
pci_type="0302 [10de:1db5] [10de:1249] a1" pci_link_speed="0.000000"/>
      </object>
    </object>
  </object>
</topology>
"""


def mask(cpu_list: str) -> str:
    value = sum(1 << c for c in cpus(cpu_list))
    words = []
    while True:
        words.append(f"0x{value & 0xFFFFFFFF:08x}")
        value >>= 32
        if not value:
            break
    return ",".join(reversed(words))


def obj(
    object_type: str, *children: str, cpu_list: str | None = None, node_list: str | None = None, **attrs: str
) -> str:
    """One hwloc 2 ``<object>`` with its sets spelled as hwloc does."""
    props = {"type": object_type, **attrs}
    if cpu_list is not None:
        props |= {"cpuset": mask(cpu_list), "complete_cpuset": mask(cpu_list)}
    if node_list is not None:
        props |= {"nodeset": mask(node_list), "complete_nodeset": mask(node_list)}
    text = " ".join(f'{key}="{value}"' for key, value in props.items())
    return f"<object {text}>{''.join(children)}</object>" if children else f"<object {text}/>"


def document(machine: str) -> str:
    head = '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n'
    return f'{head}<topology version="2.0">{machine}</topology>\n'


def gpu_under_bridge(bus: str, pci_type: str = "0302 [10de:20b0] [10de:134f] a1") -> str:
    return obj(
        "Bridge",
        obj("PCIDev", pci_busid=bus, pci_type=pci_type),
        bridge_type="0-1",
        depth="0",
        bridge_pci=f"0000:[{bus[5:7]}-{bus[5:7]}]",
    )


def pu(cpu: int) -> str:
    return obj("PU", cpu_list=str(cpu), os_index=str(cpu))


def machine(*children: str, cpu_list: str, node_list: str) -> str:
    return obj(
        "Machine",
        *children,
        cpu_list=cpu_list,
        node_list=node_list,
        os_index="0",
        allowed_cpuset=mask(cpu_list),
        allowed_nodeset=mask(node_list),
    )
