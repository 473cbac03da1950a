"""The bench's output: agreement with the baseline, the table, the JSON and the plot."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.bench.modes import ModeResult


@dataclass(frozen=True)
class Flip:
    id: str
    baseline: str  # the baseline's label
    label: str  # this mode's label
    baseline_margin: float  # top-two log-probability margins: a flip on a near-tie is rounding, not a bug
    margin: float


@dataclass(frozen=True)
class Agreement:
    compared: int  # tickets both modes ran
    agreed: int
    flips: list[Flip] = field(default_factory=list)

    @property
    def fraction(self) -> float | None:
        return self.agreed / self.compared if self.compared else None


def agreement(baseline: ModeResult, mode: ModeResult) -> Agreement:
    base = {
        tid: (lab, m) for tid, lab, m in zip(baseline.ids, baseline.labels, baseline.margins, strict=True)
    }
    flips: list[Flip] = []
    compared = 0
    for tid, lab, margin in zip(mode.ids, mode.labels, mode.margins, strict=True):
        if tid not in base:
            continue
        compared += 1
        if base[tid][0] != lab:
            flips.append(Flip(tid, base[tid][0], lab, round(base[tid][1], 4), round(margin, 4)))
    return Agreement(compared, compared - len(flips), flips)


@dataclass
class Report:
    machine: dict[str, Any]
    model: str
    dtype: str
    data: dict[str, Any]
    baseline: str
    modes: list[ModeResult]
    agreements: dict[str, Agreement]
    matmul_peak_gflops: float | None = None
    engine_gflops: float | None = None
    # mode -> (FLOPs its method needed for its tickets, FLOPs the baseline's method needs for the same ones)
    flops: dict[str, tuple[float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. what dtype auto chose, a mode that could not run

    @property
    def engine_peak_fraction(self) -> float | None:
        if self.engine_gflops is None or not self.matmul_peak_gflops:
            return None
        return self.engine_gflops / self.matmul_peak_gflops

    def bound(self, mode: ModeResult) -> float | None:
        """The speed-up over the baseline (per-item when it ran) that the FLOP ratio allows at equal
        efficiency."""
        f = self.flops.get(mode.name)
        return f[1] / f[0] if f and f[0] > 0 else None

    def of_bound(self, mode: ModeResult) -> float | None:
        """How close the measured speed-up comes to the FLOP bound (1.0: as efficient as per-item)."""
        up, bound = self.speedup(mode), self.bound(mode)
        return up / bound if up is not None and bound else None

    def gflops(self, mode: ModeResult) -> float | None:
        f = self.flops.get(mode.name)
        return f[0] / mode.seconds / 1e9 if f and mode.seconds > 0 else None

    def peak_fraction(self, mode: ModeResult) -> float | None:
        g = self.gflops(mode)
        return g / self.matmul_peak_gflops if g is not None and self.matmul_peak_gflops else None

    def speedup(self, mode: ModeResult) -> float | None:
        base = next((m for m in self.modes if m.name == self.baseline), None)
        return mode.items_per_s / base.items_per_s if base else None

    def to_json(self) -> dict[str, Any]:
        rows = []
        for m in self.modes:
            agree = self.agreements.get(m.name)
            rows.append(
                {
                    "name": m.name,
                    "seconds": round(m.seconds, 3),
                    "items_per_s": round(m.items_per_s, 3),
                    "speedup": _r(self.speedup(m), 3),
                    "padding_overhead": round(m.padding_overhead, 4),
                    "agreement": _r(agree.fraction if agree else None, 4),
                    "others_cpu": _r(m.others_cpu, 3),
                    "flop_bound": _r(self.bound(m), 3),
                    "of_bound": _r(self.of_bound(m), 4),
                    "gflops": _r(self.gflops(m), 2),
                    "peak_fraction": _r(self.peak_fraction(m), 4),
                    "tickets": len(m.ids),
                    "compared": agree.compared if agree else 0,
                    "flips": [vars(f) for f in agree.flips] if agree else [],
                    "notes": m.notes,
                }
            )
        return {
            "machine": self.machine,
            "model": self.model,
            "dtype": self.dtype,
            "data": self.data,
            "baseline": self.baseline,
            "modes": rows,
            "matmul_peak_gflops": _r(self.matmul_peak_gflops, 1),
            "engine_gflops": _r(self.engine_gflops, 1),
            "engine_peak_fraction": _r(self.engine_peak_fraction, 4),
            "notes": self.notes,
        }

    def table(self) -> str:
        m = self.machine
        lines = [
            f"machine: {m['cpu']}, {m['cores']} cores, AMX-BF16 {_yn(m['amx_bf16'])}, "
            f"AVX512-BF16 {_yn(m['avx512_bf16'])}, torch {m['torch']} with {m['torch_threads']} threads, "
            f"load average {m['loadavg_start']} -> {m.get('loadavg_end', '?')}",
            f"model: {self.model} ({self.dtype}); data: {self.data['source']}, "
            f"{self.data['tickets']} tickets",
            "",
            f"{'mode':<18} {'tickets':>7} {'seconds':>8} {'items/s':>8} {'speed-up':>9} {'bound':>7} "
            f"{'of bound':>8} {'GFLOP/s':>8} {'of peak':>7} {'padding':>8} {'agree':>7} {'others':>7}",
        ]
        for mode in self.modes:
            agree = self.agreements.get(mode.name)
            frac = agree.fraction if agree else None
            lines.append(
                f"{mode.name:<18} {len(mode.ids):>7} {mode.seconds:>8.1f} {mode.items_per_s:>8.2f} "
                f"{_fmt(self.speedup(mode), '{:.2f}x'):>9} {_fmt(self.bound(mode), '{:.2f}x'):>7} "
                f"{_fmt(self.of_bound(mode), '{:.0%}'):>8} {_fmt(self.gflops(mode), '{:.1f}'):>8} "
                f"{_fmt(self.peak_fraction(mode), '{:.0%}'):>7} {mode.padding_overhead:>8.1%} "
                f"{_fmt(frac, '{:.1%}'):>7} {_fmt(mode.others_cpu, '{:.0%}'):>7}"
            )
        lines += [
            "",
            f"speed-up and agreement are against {self.baseline}; agreement on the tickets both ran.",
            f"bound: the speed-up over {self.baseline} its FLOPs allow (same efficiency); of bound: measured "
            "speed-up / bound. GFLOP/s: the mode's method's FLOPs (padding excluded) per second; of peak: "
            f"against the {self.dtype} matmul peak measured in this run.",
        ]
        lines += self.notes
        lines += [f"{mode.name}: {note}" for mode in self.modes for note in mode.notes]
        if self.engine_gflops is not None and self.matmul_peak_gflops:
            lines.append(
                f"engine: {self.engine_gflops:.1f} GFLOP/s useful = {self.engine_peak_fraction:.1%} of a "
                f"{self.matmul_peak_gflops:.0f} GFLOP/s {self.dtype} matmul peak measured in this run"
            )
        for name, agree in self.agreements.items():
            for f in agree.flips:
                lines.append(
                    f"flip {name}: {f.id} {self.baseline}={f.baseline} (margin {f.baseline_margin:.3f}) "
                    f"-> {f.label} (margin {f.margin:.3f})"
                )
        return "\n".join(lines)


def write_json(report: Report, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_plot(report: Report, path: str | Path) -> None:
    """Items/s per mode (log scale: naive and engine are orders of magnitude apart) with speed-up labels,
    and padding overhead beside it."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    names = [m.name for m in report.modes]
    speeds = [m.items_per_s for m in report.modes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    bars = left.bar(names, speeds, color="#4c72b0")
    left.set_yscale("log")
    left.set_ylabel("tickets / s (log scale)")
    title = (
        f"{report.model}, {report.dtype}, {report.machine['cores']} cores; x: speed-up over {report.baseline}"
    )
    left.set_title(title, fontsize=9)
    for bar, mode in zip(bars, report.modes, strict=True):
        up = report.speedup(mode)
        text = f"{mode.items_per_s:.1f}/s" + (f"\n{up:.1f}x" if up is not None else "")
        left.annotate(
            text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8
        )
    left.margins(y=0.25)
    right.bar(names, [100 * m.padding_overhead for m in report.modes], color="#dd8452")
    right.set_ylabel("padding overhead (%)")
    right.set_title("padded / computed tokens", fontsize=10)
    for ax in (left, right):
        ax.tick_params(axis="x", labelrotation=35, labelsize=8)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _r(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else spec.format(x)


def _yn(flag: bool) -> str:
    return "yes" if flag else "no"
