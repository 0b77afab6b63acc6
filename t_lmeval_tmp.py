import torch, time, json
torch.set_num_threads(1)
from lopa import DecodeSettings
from lopa.models import load
from lopa.eval.lmeval import run_lm_eval
loaded = load()
t = time.time()
s = run_lm_eval(loaded, DecodeSettings(k=2, max_new_tokens=64, attention=loaded.spec.attention), "gsm8k", 4, "/tmp/lmeval-out", limit=5)
print(json.dumps({k: v for k, v in s.items() if k != "lm_eval"}, default=str), time.time() - t)
