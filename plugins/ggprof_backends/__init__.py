"""ggprof's built-in backend plugins (cpu, cuda, metal, vulkan, rocm, sycl, rpc).

Each module is a plugin exactly like a third-party one: it is listed under the
`ggprof` entry-point group in pyproject.toml and implements hooks from
ggprof.hookspecs with `@ggprof.hookimpl`.
"""
