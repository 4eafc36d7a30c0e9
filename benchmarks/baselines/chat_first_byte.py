"""The hand-written baseline of benchmarks/chat_latency.py: a bare transformers script that loads a model and
streams its reply to one prompt (the benchmark times process start to the first byte it prints).

    python benchmarks/baselines/chat_first_byte.py MODEL_FOLDER PROMPT
"""

import sys

from transformers import AutoModelForCausalLM, AutoTokenizer, TextStreamer

path = sys.argv[1]
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path).eval()
ids = tok.apply_chat_template(
    [{"role": "user", "content": sys.argv[2]}], add_generation_prompt=True, return_tensors="pt", return_dict=True
)
model.generate(**ids, max_new_tokens=24, do_sample=False, streamer=TextStreamer(tok, skip_prompt=True))
