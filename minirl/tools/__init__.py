"""Tools around the method: measuring it, and sizing it for a GPU.

bench.py        python -m minirl.tools.bench: where the time (and memory) of a step goes
measure.py      FLOP and byte counts of forward passes, peak memory, this machine's peaks
bench_report.py the benchmark's tables and plot
step_memory.py  python -m minirl.tools.step_memory: the peak memory of one step, in its own process
gpu_memory.py   an estimate of the GPU memory a run needs, from the model's config
"""
