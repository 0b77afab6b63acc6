import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

# CI machines have two cores and other work running; one thread keeps timings of tests sane.
torch.set_num_threads(1)
