"""What a run leaves in its directory, and how to look at it.

These sit above the method: they read its records (episodes, configs, evaluation results) and
write them down, and nothing in the training step depends on them.

    checkpoint.py             atomic checkpoints, --resume, the run directory's rules
    trackers.py               --report_to: tensorboard, trackio, wandb
    sample_episodes.py        episodes.json: the sample episodes the viewer replays
    curves.py, viewer.py      curves.png from metrics.jsonl; episodes.html from episodes.json
    outputs.py                what both backends write at a run's start and end
"""
