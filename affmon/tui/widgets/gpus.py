"""The GPU panel: one line per GPU (utilisation bar, memory, PCIe RX/TX, link against
its maximum, NUMA node) and a plotext history of utilisation and PCIe traffic.

Below ``COMPACT_BELOW`` columns a line leaves out the bar, the node and the padding, so an
H200's line is 74 characters and fits an 80-column terminal's panel on one line; the
panel's text never wraps (a wrapped "x16" read as a second GPU)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text

from affmon.core import fmt
from affmon.core.text import term_safe
from affmon.tui.model.views import GpuHistory, GpuRow
from affmon.tui.palette import Palette
from affmon.tui.widgets.plot import LazyPlot
from affmon.tui.widgets.quiet import QuietStatic

BAR_WIDTH = 10
COMPACT_BELOW = 98  # columns of the panel under which a line is compact


def bar(percent: float | None, width: int = BAR_WIDTH) -> str:
    if percent is None:
        return "·" * width
    full = round(max(0.0, min(100.0, percent)) / 100 * width)
    return "█" * full + "░" * (width - full)


def link_text(g: GpuRow) -> tuple[str, bool]:
    """``gen5 x16`` when at its maximum; ``gen3/5 x8/16`` (marked) when below it."""
    degraded = g.gen_below_max or g.width_below_max
    gen = f"gen{fmt.node(g.link_gen)}" + (f"/{g.max_gen}" if g.gen_below_max else "")
    width = f"x{fmt.node(g.link_width)}" + (f"/{g.max_width}" if g.width_below_max else "")
    return f"{gen} {width}", degraded


def gpu_line(g: GpuRow, p: Palette, compact: bool = False) -> Text:
    """One GPU; ``compact`` (a narrow terminal) leaves out the bar, the node and padding."""
    name = (g.name or "GPU").replace("NVIDIA ", "")
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"GPU{g.index:<2}", style="bold")
    text.append(f"{name[:8]:<8} " if compact else f"{name[:10]:<10} ")
    if g.lost:
        text.append("LOST: NVML says the GPU is lost (GPU_IS_LOST)", style=f"bold {p.error}")
        return text
    util = g.util_percent
    color = p.muted if util is None else (p.success if util >= 80 else p.warning if util >= 50 else p.error)
    if not compact:
        text.append(bar(util) + " ", style=color)
    text.append(f"{fmt.percent(util):>4}", style=f"bold {color}")
    mem = f"{fmt.gib(g.mem_used_bytes)}/{fmt.gib(g.mem_total_bytes)} GiB"
    gap = " " if compact else "  "
    text.append(f"{gap}mem ", style=p.muted)
    text.append(mem if compact else f"{mem:>13}")
    text.append(f"{gap}RX ", style=p.muted)
    text.append(f"{fmt.bytes_per_s(g.pcie_rx_bytes_per_s):>10}")
    text.append(f"{gap}TX ", style=p.muted)
    text.append(f"{fmt.bytes_per_s(g.pcie_tx_bytes_per_s):>10}")
    link, degraded = link_text(g)
    text.append("  ")
    text.append(link, style=f"bold {p.warning}" if degraded else "")
    if not compact:
        text.append("  node ", style=p.muted)
        text.append(fmt.node(g.numa_node))
    return text


def gpu_lines(gpus: Sequence[GpuRow], p: Palette, *, compact: bool) -> Text:
    """One line per GPU; a line too long for the panel ends in an ellipsis, never wraps."""
    text = Text("\n", no_wrap=True, overflow="ellipsis").join(gpu_line(g, p, compact) for g in gpus)
    text.no_wrap, text.overflow = True, "ellipsis"
    return text


class GpuPanel(QuietStatic):
    _last: tuple[Sequence[GpuRow], Palette, str | None] | None = None

    def on_resize(self) -> None:
        if self._last is not None:
            self.show(*self._last)

    _built: tuple[object, ...] | None = None

    def show(self, gpus: Sequence[GpuRow], p: Palette, nvml_status: str | None) -> None:
        self._last = (gpus, p, nvml_status)
        inputs = (tuple(gpus), p, nvml_status, self.size.width)
        if inputs == self._built:  # built again only when what it shows changed
            return
        self._built = inputs
        if not gpus:
            self.put(Text(term_safe(nvml_status or "no GPUs"), style=p.muted))
            return
        self.put(gpu_lines(gpus, p, compact=0 < self.size.width < COMPACT_BELOW))


def _points(t: Sequence[float], v: Sequence[float | None], scale: float = 1.0) -> tuple[list[float], list[float]]:
    pairs = [(x, y / scale) for x, y in zip(t, v, strict=False) if y is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def plot_title(data: Sequence[tuple[int, GpuHistory]]) -> str:
    """What the plot shows and over how long: the x axis is seconds, not minutes."""
    span = max((-t for _, h in data for t in h.util_percent.t_s), default=0.0)
    return f"GPU utilisation % (left) and PCIe GiB/s (right), last {span:.0f} s"


class GpuPlot(LazyPlot[Mapping[int, GpuHistory]]):
    """Utilisation (%, left axis) and PCIe RX/TX (GiB/s, right axis) of every GPU. The
    labels name their axis and unit, and the title the span the x axis covers (seconds
    before the newest sample): plotext marks a right-axis line only with "⅃"."""

    def show(self, history: Mapping[int, GpuHistory], p: Palette) -> None:
        self.put(history)  # as it is: its series are built when drawn, so only where seen

    def draw(self, history: Mapping[int, GpuHistory]) -> None:
        data = tuple(sorted(history.items()))
        plt = self.plt
        plt.title(plot_title(data))
        for index, h in data:
            x, y = _points(h.util_percent.t_s, h.util_percent.values)
            if x:
                plt.plot(x, y, label=f"GPU{index} util % (left axis)", marker="braille", color="green")
            x, y = _points(h.pcie_rx_bytes_per_s.t_s, h.pcie_rx_bytes_per_s.values, 2**30)
            if x:
                label = f"GPU{index} PCIe RX GiB/s (right axis)"
                plt.plot(x, y, label=label, yside="right", marker="braille", color="cyan")
            x, y = _points(h.pcie_tx_bytes_per_s.t_s, h.pcie_tx_bytes_per_s.values, 2**30)
            if x:
                label = f"GPU{index} PCIe TX GiB/s (right axis)"
                plt.plot(x, y, label=label, yside="right", marker="braille", color="magenta")
        plt.ylim(0, 100)
        top = max(
            (v for _, h in data for s in (h.pcie_rx_bytes_per_s, h.pcie_tx_bytes_per_s) for v in s.values if v),
            default=0.0,
        )
        plt.ylim(0, max(1.0, top / 2**30), yside="right")  # type: ignore[arg-type]  # the stub says float
        plt.xlabel("seconds before now")
