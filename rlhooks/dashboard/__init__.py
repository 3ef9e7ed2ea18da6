"""``rlhooks dashboard``: a live, interactive web page over runs' ``metrics.jsonl``.

    rlhooks dashboard runs/demo [runs/other ...] [--host 127.0.0.1] [--port 8501]

A Streamlit app (the ``dashboard`` extra: ``pip install -e '.[dashboard]'`` in the clone) with Plotly charts.
It tails each run's JSONL file (``data.RunTail``: only new complete lines are parsed on each
refresh), so it follows a run while it is being written, and overlays several runs in every
chart. Panels: overview; reward functions and contributions; quality; training dynamics;
per-source composition and rewards; sampler weights and curriculum; DAPO filter; alerts;
sample tables; raw data and the run-end JSON summaries.

``data`` needs only pandas; ``app`` is the Streamlit script; ``cli`` registers the command.
"""
