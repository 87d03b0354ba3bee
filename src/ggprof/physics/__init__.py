"""The physics: what the hardware allows and what llama.cpp reaches of it.

`roofline`: decode and prefill ceilings, latency floors, memory fit and offload split, the
expected band a prediction shows. `expected`: the expected-speed model fitted on published
results (its bands). `serving`: capacity planning for many users (`ggprof plan`).
"""
