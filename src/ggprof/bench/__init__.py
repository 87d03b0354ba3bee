"""What every engine shares: the run's parameters and results (`results.py`), its context
(`context.py`), the stopping-and-probe policy (`stopping.py`), one supervisor for the programs
engines start (`supervise.py`), llama-bench's formats (`llamabench.py`) and the compute roofs kept
per host (`roofs.py`). Each engine itself lives in ggprof.engines."""
