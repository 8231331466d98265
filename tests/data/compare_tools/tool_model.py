"""A tiny torch model dumped by the tool itself (run by make_fixtures.py in
the tool's venv): ``python tool_model.py msprobe|msit OUT SCALE``."""

import json
import sys
import tempfile
from pathlib import Path

import torch

tool, out, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.act = torch.nn.GELU()

    def forward(self, x):
        return self.act(self.lin(x) * (1 + scale))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        h = self.block(x).to(torch.bfloat16)
        return torch.softmax(self.norm(h.float()), dim=-1)


net = Net()
x = torch.randn(2, 8)
if tool == "msit":
    from msit_llm import DumpConfig, register_hook

    register_hook(net, DumpConfig(dump_path=out, token_range=[0]))
    with torch.no_grad():
        net(x)
else:
    from msprobe.pytorch import PrecisionDebugger

    cfg = Path(tempfile.mkdtemp()) / "config.json"
    cfg.write_text(json.dumps({"task": "tensor", "dump_path": out, "rank": [], "step": [], "level": "L1",
                               "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}))
    dbg = PrecisionDebugger(config_path=str(cfg))
    dbg.start()
    with torch.no_grad():
        net(x)
    dbg.stop()
    dbg.step()
