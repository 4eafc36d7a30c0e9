"""`autotrain app`: a local web page to edit configs, start / stop / resume runs and watch them train.

Needs the optional extra: `pip install -e ".[app]"` (fastapi, uvicorn).
"""
