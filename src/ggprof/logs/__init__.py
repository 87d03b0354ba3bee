"""Pasted logs: the console output of llama.cpp's tools and the servers around them, read into
facts (model, device, offload, threads, build) and speeds, each with the line it came from."""
