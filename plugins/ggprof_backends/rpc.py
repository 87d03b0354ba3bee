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
            "a smaller model ran than the one named",
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
        if any(m.link is not None and m.link.throughput.source != "measured" for m in split.members):
            causes.append("a link slower than its declared figure: measure it with `ggprof host --rpc`")
        checks.append(f"the split's pace: {split.pace}")
        return Diagnosis(causes=tuple(causes), checks=tuple(checks))


BACKEND = RpcBackend()


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(BACKEND)
