"""`ggprof host --rpc`: each rpc-server's protocol, devices and measured link, as JSON and text."""

from __future__ import annotations

from typing import Any

from ggprof.machine.rpc import RpcServer
from ggprof.units import clean, fmt_bytes, fmt_rate


def servers_dict(servers: list[RpcServer]) -> dict[str, Any]:
    return {"rpc_servers": [_server(s) for s in servers]}


def _server(s: RpcServer) -> dict[str, Any]:
    link = s.link
    return {
        "endpoint": s.endpoint,
        "protocol": ".".join(str(v) for v in s.protocol),
        "devices": [{"name": d.name, "free_bytes": d.free_bytes, "total_bytes": d.total_bytes} for d in s.devices],
        "rtt_s": link.rtt_s if link else None,
        "rtt_source": link.rtt.describe() if link else None,
        "upload_bytes_per_s": link.throughput_bytes_per_s if link else None,
        "upload_source": link.throughput.describe() if link else None,
        "download_bytes_per_s": link.download_bytes_per_s if link else None,
        "download_source": link.download.describe() if link and link.download else None,
        "notes": list(s.notes),
    }


def servers_text(servers: list[RpcServer]) -> str:
    lines = []
    for s in servers:
        protocol = ".".join(str(v) for v in s.protocol)
        lines.append(f"rpc-server {clean(s.endpoint)} (RPC protocol {protocol})")
        for d in s.devices:
            lines.append(f"  device {clean(d.name)}: {fmt_bytes(d.total_bytes)} ({fmt_bytes(d.free_bytes)} free)")
        if s.link is not None:
            link = s.link
            lines.append(f"  round trip {link.rtt_s * 1e3:.3g} ms [{clean(link.rtt.describe())}]")
            lines.append(
                f"  to the server {fmt_rate(link.throughput_bytes_per_s)} [{clean(link.throughput.describe())}]"
            )
            if link.download is not None:
                lines.append(
                    f"  from the server {fmt_rate(link.download_bytes_per_s)} [{clean(link.download.describe())}]"
                )
        for note in s.notes:
            lines.append(f"  note: {clean(note)}")
    return "\n".join(lines)
