"""`ggprof bench`: llama.cpp prefill and decode, measured in a child process like llama-bench."""
