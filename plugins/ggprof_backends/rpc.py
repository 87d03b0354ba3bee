"""The RPC backend: a model split over machines with llama.cpp's rpc-server. Its expected
speed is the split's (each device at its own backend's band, plus each link's round trip
and bytes; `Prediction.split`), and it says which term of the split sets the pace when a
run is slow: the logits crossing a link, a slow link, a slow device in the chain."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ggprof import Backend, Causes, Detection, Diagnosis, EfficiencyBand, fmt_bytes, fmt_rate, hookimpl

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import HostContext, JudgeCase


class RpcBackend(Backend):
    name = "rpc"
    # Used only when a run's split is not known (no --rpc servers, no --rpc-device): the
    # prediction of a known split carries its own band.
    band = EfficiencyBand(low=0.05, high=0.9, source="assumption: an RPC split whose devices and links are unknown")
    causes = Causes(
        impossible=(
            "layers ran on a device the split does not name (another rpc-server, a local GPU)",
            "another model or quant than the one named: a smaller one",
            "a declared device or link is slower than the real one: measure it with `ggprof host --rpc`",
        ),
        slow=(
            "a link slower than declared (Wi-Fi, a 100 Mb port, a congested switch)",
            "an rpc-server busy with another client, or its machine busy",
            "an rpc-server started without its GPU backend (a CPU-only build of rpc-server)",
        ),
        slow_next_step="measure every link with `ggprof host --rpc HOST:PORT,...` and run `ggprof profile --rpc` again",
    )

    def detect(self, host: HostContext) -> Detection:
        return Detection(backend=self.name, reason="RPC devices are other machines: pass --rpc host:port")

    def diagnose(self, case: JudgeCase) -> Diagnosis:
        split = case.prediction.split if case.prediction else None
        if split is None:
            return Diagnosis()
        checks, causes = [], []
        for h in split.decode.hops:
            m = split.members[h.member]
            link = m.link
            if link is None:
                continue
            checks.append(
                f"link to {m.label}: {link.name}, {fmt_rate(link.throughput_bytes_per_s)} "
                f"[{link.throughput.describe()}], round trip {link.rtt_s * 1e3:.2g} ms [{link.rtt.describe()}]"
            )
            if h.output:
                causes.append(
                    f"the output layer is on {m.label}: {fmt_bytes(h.returned_bytes, binary=False)} of logits "
                    "cross the link every token (keep the output layer on the main host: a local GPU, "
                    "or --tensor-split giving the last device no layers)"
                )
        explained = _what_the_gap_fits(case, checks)
        if any(m.link is not None and m.link.throughput.source != "measured" for m in split.members):
            causes.append("a link slower than its declared figure: measure it with `ggprof host --rpc`")
        checks.append(f"the split's pace: {split.pace}")
        return Diagnosis(causes=(*explained, *causes), checks=tuple(checks))


# A per-token cost explains a slow run when it accounts for at least this share of the time the
# run lost against the slow end of its band (and at most twice it): a cause that could explain
# a third of the gap is not named as the cause.
EXPLAINS = (0.5, 2.0)


def _what_the_gap_fits(case: JudgeCase, checks: list[str]) -> list[str]:
    """Per-token costs a split can carry beyond the band (the graph re-sent, MoE experts on the
    main host), each checked against the time the run lost; those that fit it, best first."""
    split = case.prediction.split if case.prediction else None
    tg = case.measured_tg_tok_s
    if split is None or split.band is None or not tg:
        return []
    gap_s = 1 / tg - split.band.slow_s
    lost = f"the run lost {gap_s * 1e3:.3g} ms a token against the band's slow end"
    found: list[tuple[float, str]] = []
    sent, resend_s = split.graph_resend
    if resend_s > 0:
        checks.append(
            f"the graph re-sent every token would cost {fmt_bytes(sent, binary=False)}, {resend_s * 1e3:.3g} ms; {lost}"
        )
        if gap_s > 0 and EXPLAINS[0] <= resend_s / gap_s <= EXPLAINS[1]:
            found.append(
                (
                    abs(1 - resend_s / gap_s),
                    f"the compute graph crosses the link every token ({fmt_bytes(sent, binary=False)}, "
                    f"{resend_s * 1e3:.3g} ms of the {gap_s * 1e3:.3g} ms lost): a llama.cpp build from before "
                    "graph reuse (PR #15405, November 2025) on the main host or an rpc-server, or a remote "
                    "device's layers cut into several graphs (tensors overridden to the main host inside them)",
                )
            )
    trips, experts_s = split.experts_on_host
    if experts_s > 0:
        checks.append(f"MoE experts on the main host would cost {trips} round trips, {experts_s * 1e3:.3g} ms; {lost}")
        if gap_s > 0 and EXPLAINS[0] <= experts_s / gap_s <= EXPLAINS[1]:
            found.append(
                (
                    abs(1 - experts_s / gap_s),
                    f"MoE experts kept on the main host (--n-cpu-moe, -ot exps=CPU) inside the remote layers: "
                    f"{trips} round trips a token ({experts_s * 1e3:.3g} ms of the {gap_s * 1e3:.3g} ms lost); "
                    "keep each layer's experts on the device that holds the layer",
                )
            )
    return [text for _, text in sorted(found)]


BACKEND = RpcBackend()


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(BACKEND)
