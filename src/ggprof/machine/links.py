"""Network links between the machines of a llama.cpp RPC split: what a link moves per second
and how long a round trip takes, each figure with its source.

The named links are Ethernet at its IEEE 802.3 line rate times the TCP payload share of a
full 1500-byte frame (1448 payload bytes of 1538 on the wire, with timestamps: 94.1%), and a
round-trip time typical of one switched LAN hop; they are planning figures. `ggprof host
--rpc` measures a real link through llama.cpp's own RPC client instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ggprof.errors import BadInputError
from ggprof.figures import Figure

TCP_PAYLOAD_SHARE = 1448 / 1538  # TCP/IPv4 with timestamps over a 1500-byte MTU Ethernet frame
MAX_LINK_CHARS = 64


@dataclass(frozen=True, kw_only=True)
class Link:
    """One machine's connection to the main host (the host that runs llama.cpp with --rpc)."""

    name: str
    throughput: Figure  # bytes/s from the main host to the server
    rtt: Figure  # seconds, one request and its reply
    download: Figure | None = None  # bytes/s back to the main host, when measured apart

    @property
    def throughput_bytes_per_s(self) -> float:
        return self.throughput.value

    @property
    def download_bytes_per_s(self) -> float:
        return self.download.value if self.download else self.throughput.value

    @property
    def rtt_s(self) -> float:
        return self.rtt.value


# name -> (line rate bits/s, typical round trip s, what the round trip rests on)
_NAMED = {
    "localhost": (None, 50e-6, "loopback on one machine: a measured figure is better (ggprof host --rpc)"),
    "100Mb": (100e6, 0.3e-3, "Fast Ethernet (IEEE 802.3u), one switched hop"),
    "1GbE": (1e9, 0.2e-3, "Gigabit Ethernet (IEEE 802.3ab), one switched hop"),
    "2.5GbE": (2.5e9, 0.2e-3, "2.5GBASE-T (IEEE 802.3bz), one switched hop"),
    "5GbE": (5e9, 0.2e-3, "5GBASE-T (IEEE 802.3bz), one switched hop"),
    "10GbE": (10e9, 0.1e-3, "10 Gigabit Ethernet (IEEE 802.3ae/an), one switched hop"),
    "25GbE": (25e9, 0.05e-3, "25 Gigabit Ethernet (IEEE 802.3by), one switched hop"),
    "wifi": (500e6, 3e-3, "Wi-Fi 6 (802.11ax) at a typical real 500 Mb/s and a few ms of air time"),
}
LOOPBACK_BYTES_PER_S = 2e9  # a conservative loopback TCP stream on a desktop CPU (planning only)
LINK_NAMES = tuple(_NAMED)


def named_link(name: str) -> Link:
    key = {k.lower(): k for k in _NAMED}.get(name.strip().lower())
    if key is None:
        raise BadInputError(f"unknown link {name[:MAX_LINK_CHARS]!r}: one of {', '.join(LINK_NAMES)}, or RATE[,RTT]")
    bits, rtt, why = _NAMED[key]
    if bits is None:
        rate = Figure(LOOPBACK_BYTES_PER_S, "theoretical", "loopback: a conservative planning figure")
    else:
        rate = Figure(bits * TCP_PAYLOAD_SHARE / 8, "theoretical", f"{key} line rate x TCP payload share 1448/1538")
    return Link(name=key, throughput=rate, rtt=Figure(rtt, "theoretical", f"typical round trip: {why}"))


_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(k|M|G)(b|B)(?:it)?(?:ps|/s|E)?\s*$")
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|µs|ms|s)\s*$")
_SCALE = {"k": 1e3, "M": 1e6, "G": 1e9}
_SECONDS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_link(text: str) -> Link:
    """`1GbE`, `2.5GbE`, `wifi`, `localhost`, or `RATE[,RTT]`: `300Mb/s,2ms`, `1.2GB/s,0.1ms`
    (b: bits, B: bytes). A named link with `,RTT` keeps its rate and takes that round trip."""
    if len(text) > MAX_LINK_CHARS:
        raise BadInputError(f"link {text[:MAX_LINK_CHARS]!r}...: longer than {MAX_LINK_CHARS} characters")
    rate_text, _, rtt_text = text.partition(",")
    if rate_text.strip().lower() in {k.lower() for k in _NAMED}:
        link = named_link(rate_text)
    else:
        m = _RATE.match(rate_text)
        if not m:
            raise BadInputError(
                f"link {text!r}: not one of {', '.join(LINK_NAMES)} nor RATE[,RTT] such as 300Mb/s,2ms or 1.2GB/s"
            )
        value = float(m.group(1)) * _SCALE[m.group(2)] / (8 if m.group(3) == "b" else 1)
        if not 1e3 <= value <= 1e12:
            raise BadInputError(f"link {text!r}: a throughput between 1 kB/s and 1 TB/s")
        rate = Figure(value, "user", f"given as {rate_text.strip()}")
        link = Link(name=rate_text.strip(), throughput=rate, rtt=Figure(0.2e-3, "theoretical", "typical LAN hop"))
    if rtt_text:
        m = _TIME.match(rtt_text)
        if not m:
            raise BadInputError(f"link {text!r}: the round trip after ',' is a time such as 0.5ms or 200us")
        rtt = float(m.group(1)) * _SECONDS[m.group(2)]
        if not 0 <= rtt <= 10:
            raise BadInputError(f"link {text!r}: a round trip between 0 and 10 s")
        link = Link(
            name=f"{link.name},{rtt_text.strip()}",
            throughput=link.throughput,
            rtt=Figure(rtt, "user", f"given as {rtt_text.strip()}"),
        )
    return link
